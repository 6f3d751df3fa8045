//! A throwaway etcd for tests: `/usr/bin/etcd` (Debian's `etcd-server`) on free loopback ports
//! with a temporary data directory, killed and removed when dropped. Used by this crate's
//! conformance tests and by the server's tests on etcd. [`TestEtcdCluster`] runs several
//! members on loopback ports, for fault tests: kill a member, restart it, find the leader.

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
        Self::start_with(&[])
    }

    /// [`TestEtcd::start`] with more server flags. Returns once etcd listens for clients; an
    /// etcd that exits first (its ports taken by another process since they were chosen) is
    /// started again on other ports, up to five times.
    pub fn start_with(extra: &[&str]) -> std::io::Result<TestEtcd> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match Self::spawn(extra)? {
                Some(etcd) => return Ok(etcd),
                None if attempts < 5 => continue,
                None => {
                    return Err(std::io::Error::other(
                        "etcd exited at start five times in a row",
                    ))
                }
            }
        }
    }

    /// One start: `None` when etcd exits before it listens.
    fn spawn(extra: &[&str]) -> std::io::Result<Option<TestEtcd>> {
        let dir = tempfile::tempdir()?;
        // Both listeners are held until both ports are known, so the two differ.
        let (a, b) = (
            TcpListener::bind("127.0.0.1:0")?,
            TcpListener::bind("127.0.0.1:0")?,
        );
        let (client, peer) = (a.local_addr()?.port(), b.local_addr()?.port());
        drop((a, b));
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut child = Command::new(ETCD)
            .arg("--name=test")
            .arg(format!("--data-dir={}", dir.path().display()))
            .arg(format!("--listen-client-urls={url}"))
            .arg(format!("--advertise-client-urls={url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=test={peer_url}"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            if child.try_wait()?.is_some() {
                return Ok(None);
            }
            if std::net::TcpStream::connect(("127.0.0.1", client)).is_ok()
                || std::time::Instant::now() >= deadline
            {
                return Ok(Some(TestEtcd {
                    child,
                    _dir: dir,
                    url,
                }));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
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

/// One member of a [`TestEtcdCluster`]: its name, ports and data directory (kept across a
/// kill, so that a restart rejoins with its state), and its process while it runs.
struct Member {
    name: String,
    client_url: String,
    peer_url: String,
    dir: std::path::PathBuf,
    child: Option<Child>,
}

/// A running etcd cluster of several members on loopback ports (each its own client port, peer
/// port and data directory), for fault tests: members can be killed with SIGKILL and restarted
/// on the same data directory and ports, and the current leader can be found.
pub struct TestEtcdCluster {
    members: Vec<Member>,
    initial_cluster: String,
    /// Unique per cluster, so that members of two clusters never join each other.
    token: String,
    _root: tempfile::TempDir,
}

impl std::fmt::Debug for TestEtcdCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEtcdCluster")
            .field("endpoints", &self.endpoints())
            .finish()
    }
}

impl Drop for TestEtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

impl TestEtcdCluster {
    /// Starts `size` members that form one new cluster (`--initial-cluster` names them all,
    /// `--initial-cluster-state new`). The cluster answers once a quorum has started and elected
    /// a leader; [`TestEtcdCluster::store`] and [`TestEtcdCluster::leader`] wait for that.
    ///
    /// The ports are free when picked but not held: when a member cannot bind one (it exits
    /// within moments), the whole cluster starts again on other ports, up to three times.
    pub fn start(size: usize) -> std::io::Result<TestEtcdCluster> {
        let mut tries = 0;
        loop {
            tries += 1;
            let mut cluster = Self::start_once(size)?;
            std::thread::sleep(std::time::Duration::from_millis(300));
            let exited = (0..size).any(|i| cluster.exited(i));
            if !exited || tries == 3 {
                return Ok(cluster);
            }
            for i in 0..size {
                cluster.kill(i);
            }
        }
    }

    /// Whether member `i` was started and has exited on its own.
    fn exited(&mut self, i: usize) -> bool {
        self.members[i]
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// The end of member `i`'s log (its standard error), for failure messages.
    fn log_tail(&self, i: usize) -> String {
        let log = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    fn log_path(&self, i: usize) -> std::path::PathBuf {
        self._root.path().join(format!("member{i}.log"))
    }

    fn start_once(size: usize) -> std::io::Result<TestEtcdCluster> {
        let root = tempfile::tempdir()?;
        let mut members = Vec::with_capacity(size);
        for i in 0..size {
            let (client, peer) = (free_port()?, free_port()?);
            members.push(Member {
                name: format!("member{i}"),
                client_url: format!("http://127.0.0.1:{client}"),
                peer_url: format!("http://127.0.0.1:{peer}"),
                dir: root.path().join(format!("member{i}")),
                child: None,
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        let token = root.path().file_name().map_or_else(
            || "strata-test".into(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut cluster = TestEtcdCluster {
            members,
            initial_cluster,
            token,
            _root: root,
        };
        for i in 0..size {
            cluster.spawn(i)?;
        }
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> std::io::Result<()> {
        let m = &self.members[i];
        let child = Command::new(ETCD)
            .arg(format!("--name={}", m.name))
            .arg(format!("--data-dir={}", m.dir.display()))
            .arg(format!("--listen-client-urls={}", m.client_url))
            .arg(format!("--advertise-client-urls={}", m.client_url))
            .arg(format!("--listen-peer-urls={}", m.peer_url))
            .arg(format!("--initial-advertise-peer-urls={}", m.peer_url))
            .arg(format!("--initial-cluster={}", self.initial_cluster))
            .arg("--initial-cluster-state=new")
            .arg(format!("--initial-cluster-token={}", self.token))
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.log_path(i))?,
            )
            .spawn()?;
        self.members[i].child = Some(child);
        Ok(())
    }

    /// The number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Every member's client URL, in member order (join them with commas for
    /// `--etcd-servers`).
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// Member `i`'s client URL.
    pub fn endpoint(&self, i: usize) -> &str {
        &self.members[i].client_url
    }

    /// Whether member `i` runs (was not killed, or was restarted).
    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// Kills member `i` with SIGKILL, as a crash would, and reaps it. Its data directory stays.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes member `i` with SIGSTOP: its connections stay open and nothing answers, as
    /// behind a network partition. [`TestEtcdCluster::resume`] thaws it.
    pub fn pause(&self, i: usize) {
        self.signal(i, "-STOP");
    }

    /// Thaws a member frozen by [`TestEtcdCluster::pause`] (SIGCONT).
    pub fn resume(&self, i: usize) {
        self.signal(i, "-CONT");
    }

    fn signal(&self, i: usize, signal: &str) {
        if let Some(child) = &self.members[i].child {
            let status = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status();
            assert!(
                status.is_ok_and(|s| s.success()),
                "kill {signal} etcd member {i}"
            );
        }
    }

    /// Restarts a killed member on its data directory and ports: it rejoins the cluster with
    /// the state it had (the `--initial-cluster` flags are ignored once a data directory
    /// exists). Does nothing when it runs.
    pub fn restart(&mut self, i: usize) -> std::io::Result<()> {
        if self.members[i].child.is_some() {
            return Ok(());
        }
        self.spawn(i)
    }

    /// Asks member `i` for its status: `(its member id, the leader it knows of)`; `None` when it
    /// does not answer within a second or knows no leader.
    async fn status(&self, i: usize) -> Option<(u64, u64)> {
        self.members[i].child.as_ref()?;
        let ask = async {
            let options = etcd_client::ConnectOptions::new()
                .with_connect_timeout(std::time::Duration::from_millis(500))
                .with_timeout(std::time::Duration::from_millis(800));
            let mut client = etcd_client::Client::connect(
                std::slice::from_ref(&self.members[i].client_url),
                Some(options),
            )
            .await
            .ok()?;
            let status = client.status().await.ok()?;
            let id = status.header()?.member_id();
            (status.leader() != 0).then_some((id, status.leader()))
        };
        tokio::time::timeout(std::time::Duration::from_secs(1), ask)
            .await
            .ok()
            .flatten()
    }

    /// The index of the current leader, asking each running member's status (etcd-client's
    /// maintenance `status()`): the member whose own id is the leader it reports. Waits up to
    /// 20 s for an election to finish; panics when there is no leader by then (a quorum is
    /// down).
    pub async fn leader(&self) -> usize {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            for i in 0..self.members.len() {
                if let Some((id, leader)) = self.status(i).await {
                    if id == leader {
                        return i;
                    }
                }
            }
            if std::time::Instant::now() > deadline {
                let logs: Vec<String> = (0..self.members.len())
                    .map(|i| format!("member {i}:\n{}", self.log_tail(i)))
                    .collect();
                panic!(
                    "the etcd cluster {:?} has no leader; the end of its logs:\n{}",
                    self.endpoints(),
                    logs.join("\n")
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Waits until member `i` answers a status request and knows a leader (up to 20 s; panics
    /// after).
    pub async fn wait_member(&self, i: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self.status(i).await.is_none() {
            if std::time::Instant::now() > deadline {
                panic!("etcd member {i} ({}) does not answer", self.endpoint(i));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Connects a store to every member under `prefix`, retrying while the cluster starts (up
    /// to 20 s).
    pub async fn store(&self, prefix: &str) -> crate::EtcdStore {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let endpoints = self.endpoints();
        loop {
            match crate::EtcdStore::connect(&endpoints, prefix).await {
                Ok(store) => return store,
                Err(e) if std::time::Instant::now() > deadline => {
                    panic!("etcd cluster {endpoints:?} did not answer: {e}")
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
    }
}
