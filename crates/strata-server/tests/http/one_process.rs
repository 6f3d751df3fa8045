//! A `strata serve` process started on exactly the flags a test gives, whatever storage
//! `STRATA_TEST_STORAGE` picks for the shared harness: for tests whose subject is the storage
//! itself (moving data between engines, replicas sharing one etcd).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::common::Http;

/// The `strata` binary (nextest's copy when it runs from an archive).
pub fn strata_bin() -> PathBuf {
    std::env::var_os("NEXTEST_BIN_EXE_strata")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_strata")))
}

/// One server process; killed (SIGKILL) on drop.
pub struct OneProcess {
    child: Child,
    /// `host:port`.
    pub addr: String,
}

impl OneProcess {
    /// `strata serve --listen 127.0.0.1:0 --data-dir DIR FLAGS…`; `tls` says whether it serves
    /// HTTPS (the server's default) or was given `--insecure-http`.
    pub fn start(data_dir: &Path, flags: &[&str], tls: bool) -> OneProcess {
        let mut child = Command::new(strata_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(flags)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start strata");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout is piped"))
            .read_line(&mut line)
            .expect("read the listening line");
        let scheme = if tls { "https://" } else { "http://" };
        let addr = line
            .trim()
            .strip_prefix("strata: listening on ")
            .and_then(|url| url.strip_prefix(scheme))
            .unwrap_or_else(|| panic!("unexpected first line from strata: {line:?}"))
            .to_string();
        OneProcess { child, addr }
    }

    /// A plain-HTTP client for it.
    pub fn http(&self) -> Http {
        Http::to(&self.addr)
    }
}

impl Drop for OneProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
