//! `cargo xtask bench`: whole-server load. Starts a release `strata` and the hello server as
//! child processes, drives both with the load generator in `load`, prints a markdown table and
//! rewrites the "Foundation" section of `docs/benchmarks.md`. Micro-benchmarks of hot paths
//! are Criterion's job, not this one.

use std::fmt::Write as _;
use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hyper::{Method, StatusCode};

use crate::load::{self, Outcome, Scenario, Workload};
use crate::{cargo, prereq, run_step, step, workspace_root, Result};

const CONCURRENCY: [usize; 2] = [1, 64];
const WARMUP: Duration = Duration::from_secs(1);
const SECTION: &str = "Foundation";
/// Set in the re-executed release build, so it never re-executes again.
const RELEASE_MARKER: &str = "STRATA_XTASK_BENCH_RELEASE";

/// `cargo xtask bench` flags.
#[derive(Debug)]
pub struct Options {
    seconds: u64,
    only_ceiling: bool,
    write: bool,
    check: bool,
    /// As typed, for the command line recorded in the report.
    raw: Vec<String>,
}

impl Options {
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut options = Options {
            seconds: 5,
            only_ceiling: false,
            write: true,
            check: false,
            raw: args.to_vec(),
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--seconds" => {
                    let value = args.next().ok_or("--seconds needs a value")?;
                    options.seconds = value
                        .parse()
                        .ok()
                        .filter(|s| *s > 0)
                        .ok_or_else(|| format!("--seconds: not a positive number: {value}"))?;
                }
                "--only-ceiling" => options.only_ceiling = true,
                "--no-write" => options.write = false,
                "--check" => options.check = true,
                other => return Err(format!("bench: unknown option {other}")),
            }
        }
        Ok(options)
    }
}

/// One row of the results table.
struct Row {
    scenario: &'static str,
    clients: usize,
    outcome: Outcome,
}

/// A target from the design: `scenario` at `clients` reaches `fraction` of the ceiling.
struct Target {
    label: &'static str,
    scenario: &'static str,
    clients: usize,
    fraction: f64,
}

const CEILING: &str = "ceiling (hello server)";
const CREATE: &str = "create ServiceAccount";
const GET: &str = "get ServiceAccount";

const TARGETS: [Target; 2] = [
    Target {
        label: "get at 64 clients",
        scenario: GET,
        clients: 64,
        fraction: 0.60,
    },
    Target {
        label: "durable create at 64 clients",
        scenario: CREATE,
        clients: 64,
        fraction: 0.20,
    },
];

pub fn bench(options: &Options) -> Result<()> {
    // A debug build of the load generator and the hello server would understate the ceiling,
    // so measure with an optimised xtask.
    if cfg!(debug_assertions) && std::env::var_os(RELEASE_MARKER).is_none() {
        let mut command = cargo([
            "run",
            "--quiet",
            "--release",
            "--package",
            "xtask",
            "--",
            "bench",
        ]);
        command.args(&options.raw).env(RELEASE_MARKER, "1");
        step("re-running xtask optimised, so the load generator does not limit the figures");
        return run_step(command);
    }

    let strata_binary = if options.only_ceiling {
        None
    } else {
        prereq::ensure()?;
        run_step(cargo([
            "build",
            "--release",
            "-p",
            "strata-server",
            "--bin",
            "strata",
        ]))?;
        Some(strata_binary()?)
    };

    let scratch = tempfile::Builder::new().prefix("strata-bench-").tempdir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let measure = Duration::from_secs(options.seconds);

    // Declared after `scratch`, so the children are killed before their directory is removed.
    let hello_addr = free_addr()?;
    let mut hello_cmd = Command::new(std::env::current_exe()?);
    hello_cmd.args(["hello-server", "--listen", &hello_addr.to_string()]);
    let mut hello =
        ChildGuard::spawn("hello-server", hello_cmd, &scratch.path().join("hello.log"))?;
    runtime.block_on(wait_ready(
        &mut hello,
        hello_addr,
        "/",
        Duration::from_secs(10),
    ))?;

    let mut strata = match &strata_binary {
        None => None,
        Some(binary) => {
            let addr = free_addr()?;
            let data_dir = scratch.path().join("data");
            let mut cmd = Command::new(binary);
            cmd.arg("serve")
                .arg("--listen")
                .arg(addr.to_string())
                .arg("--data-dir")
                .arg(&data_dir);
            let mut child = ChildGuard::spawn("strata", cmd, &scratch.path().join("strata.log"))?;
            runtime.block_on(wait_ready(
                &mut child,
                addr,
                "/readyz",
                Duration::from_secs(60),
            ))?;
            Some((child, addr))
        }
    };

    let mut rows = Vec::new();
    let mut next_client = 0;
    let mut measure_one = |scenario: &'static str,
                           addr: SocketAddr,
                           clients: usize,
                           workload: Workload,
                           expect: StatusCode|
     -> Row {
        step(&format!(
            "{scenario}, {clients} client(s): {WARMUP:?} warm-up + {measure:?}"
        ));
        let spec = Scenario {
            addr,
            clients,
            first_client: next_client,
            workload,
            expect,
            warmup: WARMUP,
            measure,
        };
        next_client += clients;
        let outcome = runtime.block_on(load::run(&spec));
        eprintln!(
            "{:.0} requests/s, {} error(s)",
            outcome.rps(),
            outcome.error_count()
        );
        Row {
            scenario,
            clients,
            outcome,
        }
    };

    for clients in CONCURRENCY {
        let ceiling = Workload::Get { path: "/".into() };
        rows.push(measure_one(
            CEILING,
            hello_addr,
            clients,
            ceiling,
            StatusCode::OK,
        ));
        hello.ensure_running()?;
    }
    if let Some((child, addr)) = strata.as_mut() {
        let addr = *addr;
        for clients in CONCURRENCY {
            let create = Workload::CreateServiceAccount;
            rows.push(measure_one(
                CREATE,
                addr,
                clients,
                create,
                StatusCode::CREATED,
            ));
            child.ensure_running()?;
        }
        let (status, body) = runtime.block_on(load::request_once(
            addr,
            Method::POST,
            "/api/v1/namespaces/default/serviceaccounts",
            Some(load::service_account_body("bench-get")),
        ))?;
        if status != StatusCode::CREATED {
            return Err(format!(
                "creating ServiceAccount bench-get: expected 201, got {status}: {}",
                String::from_utf8_lossy(&body)
            )
            .into());
        }
        for clients in CONCURRENCY {
            let get = Workload::Get {
                path: "/api/v1/namespaces/default/serviceaccounts/bench-get".into(),
            };
            rows.push(measure_one(GET, addr, clients, get, StatusCode::OK));
            child.ensure_running()?;
        }
    }
    drop(strata);
    drop(hello);

    let command = std::iter::once("cargo xtask bench".to_string())
        .chain(options.raw.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    let table = table(&rows);
    let verdicts = if options.only_ceiling {
        Vec::new()
    } else {
        verdicts(&rows)
    };
    println!("\n{table}");
    for (line, _) in &verdicts {
        println!("- {line}");
    }
    print_errors(&rows);

    if options.write && !options.only_ceiling {
        let section = section(&command, &table, &verdicts, &rows);
        let path = workspace_root().join("docs/benchmarks.md");
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        std::fs::write(&path, replace_section(&old, SECTION, &section))?;
        eprintln!("\nwrote the {SECTION} section of {}", path.display());
    }
    if options.check && verdicts.iter().any(|(_, pass)| !pass) {
        return Err("a benchmark target was missed".into());
    }
    Ok(())
}

/// `<target_directory>/release/strata`, wherever cargo puts targets (`CARGO_TARGET_DIR`,
/// config, or `./target`).
fn strata_binary() -> Result<PathBuf> {
    let metadata = crate::cargo_metadata(&["--no-deps"])?;
    let target = metadata["target_directory"]
        .as_str()
        .ok_or("cargo metadata: no target_directory")?;
    let binary = Path::new(target).join("release").join("strata");
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!("{} was not built", binary.display()).into())
    }
}

/// A loopback address nobody is listening on right now.
fn free_addr() -> Result<SocketAddr> {
    // The port is released before the child binds it; a collision in between is unlikely and
    // shows up as a failed readiness wait, not as wrong figures.
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// A child server that is killed when the guard goes away, on success and on error alike.
struct ChildGuard {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl ChildGuard {
    fn spawn(name: &'static str, mut command: Command, log: &Path) -> Result<ChildGuard> {
        let out = File::create(log)?;
        let err = out.try_clone()?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("could not start {name} ({}): {e}", crate::show(&command)))?;
        Ok(ChildGuard {
            name,
            child,
            log: log.to_path_buf(),
        })
    }

    /// Fails, quoting the end of the child's log, if it has exited.
    fn ensure_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(format!(
                "{} exited ({status}); end of its log:\n{}",
                self.name,
                self.log_tail()
            )
            .into()),
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // Either may fail only because the child is already gone, which is what we want.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `GET path` until it answers 200, the child dies, or `limit` passes.
async fn wait_ready(
    child: &mut ChildGuard,
    addr: SocketAddr,
    path: &str,
    limit: Duration,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        child.ensure_running()?;
        let last = match load::request_once(addr, Method::GET, path, None).await {
            Ok((StatusCode::OK, _)) => return Ok(()),
            Ok((status, _)) => format!("GET {path} answered {status}"),
            Err(e) => format!("GET {path}: {e}"),
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "{} on {addr} not ready after {limit:?} ({last}); end of its log:\n{}",
                child.name,
                child.log_tail()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ceiling_rps(rows: &[Row], clients: usize) -> Option<f64> {
    rows.iter()
        .find(|r| r.scenario == CEILING && r.clients == clients)
        .map(|r| r.outcome.rps())
}

fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | clients | requests/s | p50 | p99 | errors | of ceiling |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in rows {
        let ratio = match ceiling_rps(rows, row.clients) {
            Some(ceiling) if ceiling > 0.0 => {
                format!("{:.0}%", 100.0 * row.outcome.rps() / ceiling)
            }
            _ => "–".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {} | {} | {} | {} |",
            row.scenario,
            row.clients,
            row.outcome.rps(),
            latency(row.outcome.percentile(50.0)),
            latency(row.outcome.percentile(99.0)),
            row.outcome.error_count(),
            ratio
        );
    }
    out
}

fn latency(d: Option<Duration>) -> String {
    match d {
        None => "–".into(),
        Some(d) if d < Duration::from_millis(1) => format!("{} µs", d.as_micros()),
        Some(d) => format!("{:.2} ms", d.as_secs_f64() * 1000.0),
    }
}

/// One line per target with its verdict; a target with errors fails whatever its throughput.
fn verdicts(rows: &[Row]) -> Vec<(String, bool)> {
    TARGETS
        .iter()
        .map(|t| {
            let row = rows
                .iter()
                .find(|r| r.scenario == t.scenario && r.clients == t.clients);
            let ceiling = ceiling_rps(rows, t.clients).unwrap_or(0.0);
            let wanted = format!("{} ≥ {:.0}% of ceiling", t.label, t.fraction * 100.0);
            match row {
                Some(row) if ceiling > 0.0 => {
                    let ratio = row.outcome.rps() / ceiling;
                    let errors = row.outcome.error_count();
                    let pass = ratio >= t.fraction && errors == 0;
                    let note = if errors > 0 {
                        format!(", {errors} errors")
                    } else {
                        String::new()
                    };
                    let verdict = if pass { "PASS" } else { "FAIL" };
                    (
                        format!("{wanted}: **{verdict}** ({:.0}%{note})", ratio * 100.0),
                        pass,
                    )
                }
                _ => (format!("{wanted}: **FAIL** (not measured)"), false),
            }
        })
        .collect()
}

fn print_errors(rows: &[Row]) {
    for row in rows.iter().filter(|r| r.outcome.error_count() > 0) {
        eprintln!(
            "\nerrors in {} with {} client(s):",
            row.scenario, row.clients
        );
        for (kind, (count, sample)) in &row.outcome.errors {
            eprintln!("  {count} × {kind} {sample}");
        }
    }
}

fn section(command: &str, table: &str, verdicts: &[(String, bool)], rows: &[Row]) -> String {
    let mut out = format!("## {SECTION}\n\n");
    let _ = writeln!(out, "- Command: `{command}`");
    let _ = writeln!(out, "- Date: {}", utc_now());
    if let Some(commit) = git_commit() {
        let _ = writeln!(out, "- Commit: {commit}");
    }
    let _ = writeln!(out, "- Machine: {}", machine());
    out.push_str(
        "\nEach client holds one keep-alive HTTP/1.1 connection and sends its requests back to \
         back; 1 s of warm-up precedes the measured window. The ceiling is `cargo xtask \
         hello-server`, a bare hyper server answering 200 with a small JSON body. Server, \
         ceiling and load generator share the machine. Requests/s counts expected responses \
         only (201 for create, 200 otherwise); latencies are theirs.\n\n",
    );
    out.push_str(table);
    out.push_str("\nTargets:\n\n");
    for (line, _) in verdicts {
        let _ = writeln!(out, "- {line}");
    }
    let failing: Vec<&Row> = rows
        .iter()
        .filter(|r| r.outcome.error_count() > 0)
        .collect();
    if !failing.is_empty() {
        out.push_str("\nErrors:\n\n");
        for row in failing {
            for (kind, (count, sample)) in &row.outcome.errors {
                let _ = writeln!(
                    out,
                    "- {}, {} client(s): {count} × {kind} `{}`",
                    row.scenario,
                    row.clients,
                    sample.replace('`', "'")
                );
            }
        }
    }
    out
}

/// Replaces the `## heading` section of a markdown document (up to the next `## `), keeping
/// everything else; appends the section when the document has none.
fn replace_section(doc: &str, heading: &str, section: &str) -> String {
    let section = section.trim_end();
    if doc.trim().is_empty() {
        return format!(
            "# Benchmarks\n\nWhole-server load figures from `cargo xtask bench`; see the \
             command in each section to reproduce them.\n\n{section}\n"
        );
    }
    let lines: Vec<&str> = doc.lines().collect();
    let title = format!("## {heading}");
    let Some(start) = lines.iter().position(|l| l.trim_end() == title) else {
        return format!("{}\n\n{section}\n", doc.trim_end());
    };
    let end = lines[start + 1..]
        .iter()
        .position(|l| l.starts_with("## "))
        .map_or(lines.len(), |i| start + 1 + i);
    let mut out = String::new();
    for line in &lines[..start] {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(section);
    out.push('\n');
    if end < lines.len() {
        out.push('\n');
        for line in &lines[end..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn machine() -> String {
    let cpus = Command::new("nproc")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| n.to_string())
        })
        .unwrap_or_else(|| "?".into());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpus} CPUs (nproc), {model}")
}

fn git_commit() -> Option<String> {
    let root = workspace_root();
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(&root)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(&root)
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    Some(if dirty {
        format!("`{head}` with uncommitted changes")
    } else {
        format!("`{head}`")
    })
}

fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// `YYYY-MM-DD HH:MM UTC` for seconds since the Unix epoch.
fn format_utc(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(format_utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(format_utc(1_767_225_599), "2025-12-31 23:59 UTC");
        assert_eq!(format_utc(1_709_210_096), "2024-02-29 12:34 UTC");
    }

    #[test]
    fn section_is_replaced_and_the_rest_kept() {
        let doc = "# Benchmarks\n\nIntro.\n\n## Foundation\n\nold\n| a |\n\n## Watch\n\nkeep\n";
        assert_eq!(
            replace_section(doc, "Foundation", "## Foundation\n\nnew\n"),
            "# Benchmarks\n\nIntro.\n\n## Foundation\n\nnew\n\n## Watch\n\nkeep\n"
        );
        let last = "# Benchmarks\n\n## Other\n\nx\n\n## Foundation\n\nold\n### detail\n";
        assert_eq!(
            replace_section(last, "Foundation", "## Foundation\n\nnew\n"),
            "# Benchmarks\n\n## Other\n\nx\n\n## Foundation\n\nnew\n"
        );
    }

    #[test]
    fn section_is_appended_or_document_created() {
        assert_eq!(
            replace_section(
                "# Benchmarks\n\n## Watch\n\nw\n",
                "Foundation",
                "## Foundation\n\nnew"
            ),
            "# Benchmarks\n\n## Watch\n\nw\n\n## Foundation\n\nnew\n"
        );
        let fresh = replace_section("", "Foundation", "## Foundation\n\nnew\n");
        assert!(fresh.starts_with("# Benchmarks\n"));
        assert!(fresh.ends_with("\n\n## Foundation\n\nnew\n"));
    }

    #[test]
    fn options() {
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let o = Options::parse(&args("--seconds 2 --only-ceiling")).unwrap();
        assert_eq!(
            (o.seconds, o.only_ceiling, o.write, o.check),
            (2, true, true, false)
        );
        assert!(Options::parse(&args("--seconds 0")).is_err());
        assert!(Options::parse(&args("--seconds")).is_err());
        assert!(Options::parse(&args("--fast")).is_err());
    }
}
