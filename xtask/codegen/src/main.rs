//! Generates the Rust of `proto/` into `crates/strata-codec/src/proto/generated/`, or with
//! `--check` fails when the committed files differ from what would be generated.
//!
//! usage: strata-codegen <workspace root> [--check]

use std::path::Path;
use std::process::ExitCode;

/// The proto files, relative to `proto/`.
const FILES: [&str; 9] = [
    "k8s.io/apimachinery/pkg/runtime/generated.proto",
    "k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto",
    "k8s.io/api/core/v1/generated.proto",
    "k8s.io/api/authentication/v1/generated.proto",
    "k8s.io/api/authorization/v1/generated.proto",
    "k8s.io/api/rbac/v1/generated.proto",
    "k8s.io/api/coordination/v1/generated.proto",
    "k8s.io/api/events/v1/generated.proto",
    "k8s.io/api/autoscaling/v1/generated.proto",
];

/// Where the generated Rust goes, relative to the workspace root.
const OUT: &str = "crates/strata-codec/src/proto/generated";

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn generate(root: &Path, out: &Path) -> Result<()> {
    let descriptors = protox::compile(FILES, [root.join("proto")])?;
    std::fs::create_dir_all(out)?;
    let mut config = prost_build::Config::new();
    // Maps as BTreeMap: deterministic order, like Kubernetes' sorted map entries.
    config.btree_map(["."]);
    config.out_dir(out);
    config.include_file("mod.rs");
    config.compile_fds(descriptors)?;
    Ok(())
}

/// The names of the files `dir` holds, sorted.
fn names(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

fn run() -> Result<bool> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = Path::new(
        args.first()
            .ok_or("usage: strata-codegen <root> [--check]")?,
    );
    let check = args.iter().any(|a| a == "--check");
    let out = root.join(OUT);
    if !check {
        generate(root, &out)?;
        println!("codegen: wrote {}", out.display());
        return Ok(true);
    }
    let fresh = std::env::temp_dir().join(format!("strata-codegen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&fresh);
    generate(root, &fresh)?;
    let mut current = names(&fresh)? == names(&out).unwrap_or_default();
    for name in names(&fresh)? {
        let new = std::fs::read(fresh.join(&name))?;
        if std::fs::read(out.join(&name)).ok().as_deref() != Some(new.as_slice()) {
            eprintln!("codegen: {OUT}/{name} is stale");
            current = false;
        }
    }
    let _ = std::fs::remove_dir_all(&fresh);
    if !current {
        eprintln!("codegen: run `cargo xtask codegen` and commit the result");
    }
    Ok(current)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("codegen: error: {e}");
            ExitCode::from(2)
        }
    }
}
