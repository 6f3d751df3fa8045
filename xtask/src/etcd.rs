//! etcd members on loopback for `cargo xtask bench --only etcd` and `cargo xtask cluster`: the
//! command line of one member of a static cluster, and waiting until the cluster answers. etcd
//! itself is Debian's `etcd-server` (`/usr/bin/etcd`), or the first `etcd` on `PATH`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};

use crate::{load, prereq, Result};

/// The etcd binary: `/usr/bin/etcd`, else `etcd` on `PATH`; fails saying how to install it.
pub fn binary() -> Result<PathBuf> {
    let debian = Path::new(prereq::ETCD);
    if debian.is_file() {
        return Ok(debian.to_path_buf());
    }
    crate::find_on_path("etcd").ok_or_else(|| {
        format!(
            "etcd is not installed ({} is missing and no etcd is on PATH). Install etcd 3.4.22 \
             or later, e.g. `apt-get install etcd-server` on Debian or Ubuntu",
            prereq::ETCD
        )
        .into()
    })
}

/// One member of a static cluster on 127.0.0.1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
}

impl Member {
    /// `http://127.0.0.1:<client port>`: what `--etcd-servers` lists.
    pub fn client_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    pub fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_port))
    }

    /// The command that starts this member of `cluster` with its data in `data_dir`. On a
    /// data directory from an earlier start, etcd ignores the initial-cluster flags and
    /// rejoins with what it stored.
    pub fn command(&self, etcd: &Path, data_dir: &Path, cluster: &[Member]) -> Command {
        let initial_cluster = cluster
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect::<Vec<_>>()
            .join(",");
        let mut command = Command::new(etcd);
        command
            .arg(format!("--name={}", self.name))
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--listen-client-urls={}", self.client_url()))
            .arg(format!("--advertise-client-urls={}", self.client_url()))
            .arg(format!("--listen-peer-urls={}", self.peer_url()))
            .arg(format!("--initial-advertise-peer-urls={}", self.peer_url()))
            .arg(format!("--initial-cluster={initial_cluster}"))
            .arg("--initial-cluster-state=new")
            .arg("--initial-cluster-token=strata-xtask");
        command
    }
}

/// Polls etcd's `GET /health` on `addr` until it says the member is healthy (it has a
/// leader), `alive` fails (the process exited), or `limit` passes.
pub async fn wait_healthy(
    addr: SocketAddr,
    limit: Duration,
    mut alive: impl FnMut() -> Result<()>,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        alive()?;
        let last = match load::request_once(addr, Method::GET, "/health", None).await {
            Ok((StatusCode::OK, body)) if is_healthy(&body) => return Ok(()),
            Ok((status, body)) => format!("{status}: {}", String::from_utf8_lossy(&body)),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(format!("etcd on {addr} not healthy after {limit:?} ({last})").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a `/health` answer says `{"health":"true"}`.
fn is_healthy(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|v| v["health"] == serde_json::json!("true"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_command_names_the_whole_cluster() {
        let members: Vec<Member> = (1..=2)
            .map(|n| Member {
                name: format!("m{n}"),
                client_port: 2000 + n,
                peer_port: 3000 + n,
            })
            .collect();
        let command = members[1].command(Path::new("/usr/bin/etcd"), Path::new("/d"), &members);
        let args: Vec<String> = command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(args.contains(&"--name=m2".to_string()));
        assert!(args.contains(&"--data-dir=/d".to_string()));
        assert!(args.contains(&"--listen-client-urls=http://127.0.0.1:2002".to_string()));
        assert!(args.contains(&"--initial-advertise-peer-urls=http://127.0.0.1:3002".to_string()));
        assert!(args.contains(
            &"--initial-cluster=m1=http://127.0.0.1:3001,m2=http://127.0.0.1:3002".to_string()
        ));
    }

    #[test]
    fn health_answers() {
        assert!(is_healthy(br#"{"health":"true"}"#));
        assert!(is_healthy(br#"{"health":"true","reason":""}"#));
        assert!(!is_healthy(
            br#"{"health":"false","reason":"RAFT NO LEADER"}"#
        ));
        assert!(!is_healthy(b"not json"));
    }
}
