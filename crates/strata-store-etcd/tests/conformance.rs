//! The shared store conformance suite against a real etcd: each test starts its own
//! `/usr/bin/etcd` on loopback ports with a temporary data directory, so compactions and
//! revisions of one test never meet another's. etcd numbers from 1 and writes from 2, which the
//! suite must not notice.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_store::conformance::Subject;
use strata_store_etcd::EtcdStore;

/// The etcd binary the tests run (Debian's `etcd-server`).
const ETCD: &str = "/usr/bin/etcd";

/// A running etcd, killed with its data when dropped.
struct Etcd {
    child: Child,
    _dir: tempfile::TempDir,
    url: String,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

fn start_etcd() -> Etcd {
    assert!(
        std::path::Path::new(ETCD).exists(),
        "{ETCD} is missing: install Debian's etcd-server (.ci/run does)"
    );
    let dir = tempfile::tempdir().expect("a data directory");
    let (client, peer) = (free_port(), free_port());
    let url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new(ETCD)
        .arg("--name=conformance")
        .arg(format!("--data-dir={}", dir.path().display()))
        .arg(format!("--listen-client-urls={url}"))
        .arg(format!("--advertise-client-urls={url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=conformance={peer_url}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start etcd");
    Etcd {
        child,
        _dir: dir,
        url,
    }
}

async fn subject() -> Subject {
    let etcd = start_etcd();
    let deadline = Instant::now() + Duration::from_secs(20);
    let store = loop {
        match EtcdStore::connect(std::slice::from_ref(&etcd.url), "/registry").await {
            Ok(store) => break store,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("etcd at {} did not answer: {e}", etcd.url),
        }
    };
    Subject::with_guard(Arc::new(store), etcd)
}

strata_store::store_conformance_tests!(subject());
