//! Build prerequisites outside cargo's reach: libclang (RocksDB's bindings are generated with
//! bindgen at build time), a C/C++ compiler (RocksDB itself is C++) and protoc (the etcd
//! client compiles etcd's protos at build time); and for the tests, etcd itself. Installs what
//! it can with apt-get when running as root; otherwise says exactly what to run. It does not
//! install Rust toolchains.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Result;

/// Directories where Debian and Ubuntu put libclang, besides `/usr/lib/llvm-*/lib`.
const LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
];

/// Makes sure everything the workspace build needs is present, installing libclang with apt-get
/// when running as root. Fails with the command a person should run otherwise.
pub fn ensure() -> Result<()> {
    crate::step("checking build prerequisites (C/C++ compiler, libclang)");
    let missing_compilers: Vec<&str> = ["cc", "c++"]
        .into_iter()
        .filter(|tool| crate::find_on_path(tool).is_none())
        .collect();
    if !missing_compilers.is_empty() {
        return Err(format!(
            "{} not found on PATH; RocksDB needs a C and C++ compiler. Install them with:\n    \
             {}apt-get update && {}apt-get install -y build-essential",
            missing_compilers.join(" and "),
            sudo_prefix(),
            sudo_prefix(),
        )
        .into());
    }

    if protoc().is_none() {
        install(
            "protoc (the etcd client's build compiles etcd's protos)",
            "protobuf-compiler",
        )?;
    }
    if let Some(found) = find_libclang() {
        eprintln!("libclang: {}", found.display());
        return Ok(());
    }
    if is_root() && crate::find_on_path("apt-get").is_some() {
        eprintln!(
            "libclang not found; installing it: apt-get update && apt-get install -y libclang-dev"
        );
        let update = Command::new("apt-get").arg("update").status();
        let install = Command::new("apt-get")
            .args(["install", "-y", "libclang-dev"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status();
        match (update, install) {
            (Ok(u), Ok(i)) if u.success() && i.success() => {}
            (update, install) => {
                return Err(format!(
                    "installing libclang-dev failed (apt-get update: {}, apt-get install: {})",
                    describe(&update),
                    describe(&install)
                )
                .into())
            }
        }
        if let Some(found) = find_libclang() {
            eprintln!("libclang: {}", found.display());
            return Ok(());
        }
        return Err(
            "libclang-dev is installed but no libclang shared library was found; \
                    set LIBCLANG_PATH to the directory holding libclang.so"
                .into(),
        );
    }
    Err(format!(
        "libclang not found (RocksDB's bindings are generated with it). Install it with:\n    \
         {}apt-get update && {}apt-get install -y libclang-dev\n\
         or set LIBCLANG_PATH to the directory holding libclang.so",
        sudo_prefix(),
        sudo_prefix(),
    )
    .into())
}

/// The etcd the etcd engine's tests start (Debian's `etcd-server`).
pub const ETCD: &str = "/usr/bin/etcd";

/// What the tests need beyond the build: etcd for the etcd engine's tests.
pub fn ensure_test_tools() -> Result<()> {
    if Path::new(ETCD).is_file() {
        return Ok(());
    }
    install("etcd (the etcd engine's tests start it)", "etcd-server")
}

/// `protoc`, where prost-build looks for it: `PROTOC`, then `PATH`.
fn protoc() -> Option<PathBuf> {
    std::env::var_os("PROTOC")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| crate::find_on_path("protoc"))
}

/// Installs Debian package `package` for `what` with apt-get when running as root; otherwise
/// fails with the command to run.
fn install(what: &str, package: &str) -> Result<()> {
    if !is_root() || crate::find_on_path("apt-get").is_none() {
        return Err(format!(
            "{what} is missing. Install it with:\n    {}apt-get update && {}apt-get install -y \
             {package}",
            sudo_prefix(),
            sudo_prefix()
        )
        .into());
    }
    eprintln!("{what} is missing; installing {package} with apt-get");
    let update = Command::new("apt-get").arg("update").status();
    let install = Command::new("apt-get")
        .args(["install", "-y", package])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status();
    match (update, install) {
        (Ok(u), Ok(i)) if u.success() && i.success() => Ok(()),
        (update, install) => Err(format!(
            "installing {package} failed (apt-get update: {}, apt-get install: {})",
            describe(&update),
            describe(&install)
        )
        .into()),
    }
}

fn describe(status: &std::io::Result<std::process::ExitStatus>) -> String {
    match status {
        Ok(status) => status.to_string(),
        Err(e) => e.to_string(),
    }
}

fn sudo_prefix() -> &'static str {
    if is_root() {
        ""
    } else {
        "sudo "
    }
}

/// Where libclang is, looking where bindgen's `clang-sys` looks: `LIBCLANG_PATH` first, then
/// the usual system directories.
fn find_libclang() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("LIBCLANG_PATH") {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Some(path);
        }
        if let Some(found) = libclang_in(&path) {
            return Some(found);
        }
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("llvm-"))
        .map(|e| e.path().join("lib"))
        .collect();
    // Newest LLVM first, so the message names the one bindgen is likely to pick.
    dirs.sort();
    dirs.reverse();
    dirs.extend(LIB_DIRS.iter().map(PathBuf::from));
    dirs.iter().find_map(|dir| libclang_in(dir))
}

fn libclang_in(dir: &Path) -> Option<PathBuf> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| is_libclang(name))
        .collect();
    names.sort();
    names.first().map(|name| dir.join(name))
}

/// `libclang.so`, `libclang.so.1`, `libclang-14.so.1` — but not `libclang-cpp.so` or the
/// static `libclangAST.a`, which bindgen cannot load.
fn is_libclang(name: &str) -> bool {
    if name.starts_with("libclang.so") {
        return true;
    }
    name.strip_prefix("libclang-")
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()) && rest.contains(".so"))
}

fn is_root() -> bool {
    // The effective uid is the third field of "Uid:" in /proc/self/status; this avoids libc.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_loadable_libclang_names_only() {
        for yes in [
            "libclang.so",
            "libclang.so.1",
            "libclang-14.so.1",
            "libclang-18.so",
        ] {
            assert!(is_libclang(yes), "{yes}");
        }
        for no in [
            "libclang-cpp.so.14",
            "libclangAST.a",
            "libclang.a",
            "libclang-14.a",
        ] {
            assert!(!is_libclang(no), "{no}");
        }
    }
}
