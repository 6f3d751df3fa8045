//! `cargo xtask codegen`: regenerates the prost types of `proto/` into
//! `crates/strata-codec/src/proto/generated/` with the generator in `xtask/codegen` — a crate
//! with its own workspace, lockfile and target directory, so that its parser dependencies never
//! change the features of the crates the server builds with. The output is committed; the test
//! below fails when it is stale.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Result;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Runs the generator; `check` only compares. Returns whether it succeeded.
fn run_generator(check: bool) -> Result<bool> {
    let root = workspace_root();
    let manifest = root.join("xtask/codegen/Cargo.toml");
    // Its own target directory, beside the workspace's, so builds never invalidate each other.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("codegen");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["run", "--quiet", "--locked", "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", &target)
        .arg("--")
        .arg(&root);
    if check {
        cmd.arg("--check");
    }
    Ok(cmd.status()?.success())
}

pub fn codegen() -> Result<()> {
    if run_generator(false)? {
        Ok(())
    } else {
        Err("the generator failed".into())
    }
}

#[cfg(test)]
mod tests {
    /// The committed generated code is what `proto/` generates today.
    #[test]
    fn generated_code_is_current() {
        assert!(
            super::run_generator(true).expect("run the generator"),
            "crates/strata-codec/src/proto/generated is stale: run `cargo xtask codegen`"
        );
    }
}
