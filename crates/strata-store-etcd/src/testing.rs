//! A throwaway etcd for tests: `/usr/bin/etcd` (Debian's `etcd-server`) on free loopback ports
//! with a temporary data directory, killed and removed when dropped. Used by this crate's
//! conformance tests and by the server's tests on etcd.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

/// The etcd binary tests run.
pub const ETCD: &str = "/usr/bin/etcd";

/// A running single-member etcd.
pub struct TestEtcd {
    child: Child,
    _dir: tempfile::TempDir,
    /// The client URL, `http://127.0.0.1:<port>`.
    pub url: String,
}

impl std::fmt::Debug for TestEtcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEtcd").field("url", &self.url).finish()
    }
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl TestEtcd {
    /// Starts etcd; it answers once [`crate::EtcdStore::connect`] succeeds (well under a
    /// second). Fails when the binary is missing.
    pub fn start() -> std::io::Result<TestEtcd> {
        let dir = tempfile::tempdir()?;
        let (client, peer) = (free_port()?, free_port()?);
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new(ETCD)
            .arg("--name=test")
            .arg(format!("--data-dir={}", dir.path().display()))
            .arg(format!("--listen-client-urls={url}"))
            .arg(format!("--advertise-client-urls={url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=test={peer_url}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(TestEtcd {
            child,
            _dir: dir,
            url,
        })
    }

    /// Connects a store under `prefix`, retrying while etcd starts (up to 20 s).
    pub async fn store(&self, prefix: &str) -> crate::EtcdStore {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            match crate::EtcdStore::connect(std::slice::from_ref(&self.url), prefix).await {
                Ok(store) => return store,
                Err(e) if std::time::Instant::now() > deadline => {
                    panic!("etcd at {} did not answer: {e}", self.url)
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
    }
}
