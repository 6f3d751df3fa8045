//! `cargo xtask`: the project's only automation (tests, tidy checks, running and benchmarking
//! the server). It is not part of the server; of the workspace it depends only on
//! `strata-conformance`, the black-box checker (HTTP only, no server code).

mod bench;
mod cluster;
mod codegen;
mod conformance;
mod etcd;
mod fixtures;
mod load;
mod prereq;
mod tasks;
mod tidy;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Errors are reported once, in `main`, as text.
pub type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  test                  prerequisites, tidy, rustfmt check, clippy, a `cargo publish --dry-run`
                        of the published crates, then all tests
  run [-- ARGS...]      build and start the server on 127.0.0.1:6443 with data in ./strata-data;
                        ARGS are passed to `strata serve`
  cluster [OPTIONS] [-- ARGS...]
                        start 3 local etcd members and 2 Strata replicas over them (release
                        build) until Ctrl-C; ARGS go to both replicas' `strata serve`
      --dir DIR         data and logs (default ./strata-cluster, kept between runs)
      --temp            data and logs in a temporary directory, removed at exit
      --strata-binary PATH
                        run this server binary instead of building one
  bench [OPTIONS]       whole-server load benchmarks; writes docs/benchmarks.md
      --only PARTS      run only these, comma-separated: foundation, lists, watch, updates,
                        formats, crd, metrics, etcd (default: all but etcd, which needs
                        /usr/bin/etcd)
      --seconds N       foundation, updates, crd, metrics and etcd: measured seconds per scenario
                        (default 5; 1 s warm-up first)
      --only-ceiling    foundation: only the hello-server ceiling (no server build, no doc update)
      --list-sizes N,.. lists: collection sizes (default 10000,100000)
      --watchers N      watch and etcd: concurrent watchers (default 1000)
      --rate N          watch and etcd: creates per second in the paced run (default 500)
      --watch-seconds N watch and etcd: length of each run's write phase (default 10)
      --strata-binary PATH
                        measure this server binary instead of building one from the tree
      --no-write        print the tables but leave docs/benchmarks.md alone
      --check           exit 1 when a target is missed
  conformance --server URL [OPTIONS]
                        black-box checks of the specification's rules against any
                        Kubernetes-compatible server; it makes and removes a namespace of its own
      --kubeconfig FILE server and credentials from FILE's current context (--context NAME)
      --token T, --certificate-authority FILE, --insecure-skip-tls-verify
      --read-server URL reads and watches through another replica of the same cluster
      --only SECTION... sections by number (4.5) or name (watch); --list shows them
      --profile spec|kubernetes
                        where the spec and Kubernetes 1.31 differ, which one to expect
      --report FILE     JUnit XML (FILE.xml) and a JSON summary (FILE.json)
                        (`cargo xtask conformance --help` for all options)
  codegen               regenerate the prost types of proto/ into crates/strata-codec (no protoc)
  fixtures              regenerate the golden fixtures in testdata/HEAD, then check them
  tidy                  check dependency directions and crate manifests (reads `cargo metadata`)
  help                  this text
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = match cmd.as_str() {
        "test" if rest.is_empty() => tasks::test(),
        "run" => tasks::run(strip_separator(rest)),
        "bench" => match bench::Options::parse(rest) {
            Ok(options) => bench::bench(&options),
            Err(message) => return usage_error(&message),
        },
        "cluster" => match cluster::Options::parse(rest) {
            Ok(options) => cluster::cluster(&options),
            Err(message) => return usage_error(&message),
        },
        "conformance" => return conformance::conformance(rest),
        "tidy" if rest.is_empty() => tidy::tidy(),
        "codegen" if rest.is_empty() => codegen::codegen(),
        "fixtures" if rest.is_empty() => fixtures::fixtures(),
        "hello-server" => load::hello_server_main(rest),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(())
        }
        _ => return usage_error(&format!("unknown command or arguments: {}", args.join(" "))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask {cmd}: error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("xtask: {message}\n");
    eprint!("{USAGE}");
    ExitCode::from(2)
}

/// `cargo xtask run -- --flag` reaches us as `run -- --flag`; the `--` is ours, not the server's.
fn strip_separator(args: &[String]) -> &[String] {
    match args.split_first() {
        Some((first, rest)) if first == "--" => rest,
        _ => args,
    }
}

/// The workspace root: xtask always lives at `<root>/xtask`.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// A `cargo` command running in the workspace root. Uses the cargo that started us, so the
/// toolchain stays the same.
pub fn cargo<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.args(args).current_dir(workspace_root());
    command
}

/// Prints a step header, runs the command, and fails unless it exits successfully.
pub fn run_step(mut command: Command) -> Result<()> {
    let shown = show(&command);
    step(&shown);
    let status = command
        .status()
        .map_err(|e| format!("could not start `{shown}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{shown}` failed ({status})").into())
    }
}

/// Announces a step; the marker makes steps easy to find in long CI logs.
pub fn step(what: &str) {
    eprintln!("\n==> {what}");
}

/// The command as a person would type it (`cargo` rather than the full toolchain path).
pub fn show(command: &Command) -> String {
    let program = Path::new(command.get_program());
    let mut text = if program.file_stem() == Some(OsStr::new("cargo")) {
        "cargo".to_string()
    } else {
        program.display().to_string()
    };
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Looks `name` up on `PATH`, like `command -v`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Runs `cargo metadata` and parses it.
pub fn cargo_metadata(extra: &[&str]) -> Result<serde_json::Value> {
    let mut command = cargo(["metadata", "--format-version", "1"]);
    command.args(extra);
    let output = command
        .output()
        .map_err(|e| format!("could not run cargo metadata: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("cargo metadata printed invalid JSON: {e}"))?)
}
