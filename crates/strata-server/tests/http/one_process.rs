//! A `strata serve` process started on exactly the flags a test gives, whatever storage
//! `STRATA_TEST_STORAGE` picks for the shared harness: for tests whose subject is the storage
//! itself (moving data between engines, replicas sharing one etcd).

use std::path::Path;
use std::process::{Child, Command, Stdio};

pub use crate::common::strata_bin;
use crate::common::{listening_addr, Http};

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
        let addr = listening_addr(&mut child, tls);
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
