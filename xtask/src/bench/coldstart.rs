//! The cold-start benchmark of `cargo xtask bench`: a RocksDB store holding
//! [`OBJECTS`] ServiceAccounts, the server stopped and started again, and the time from the
//! start of the process until `/readyz` answers 200 and until a consistent list (no
//! `resourceVersion`) answers, as a first `limit=500` page and whole; then the server's
//! resident memory against the objects' JSON as served.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};

use super::lists::scan_list;
use super::{procfs, start_strata, ChildGuard, Strata};
use crate::load;
use crate::{step, Result};

/// The section of `docs/benchmarks.md` this part rewrites.
pub const SECTION: &str = "Cold start and memory";
/// ServiceAccounts stored before the restart.
pub const OBJECTS: usize = 100_000;
/// Target: from process start to a consistent list answered, below this.
const TARGET_START: Duration = Duration::from_secs(1);
/// Target: resident memory at most this many times the objects' JSON…
const TARGET_MEMORY_RATIO: f64 = 2.0;
/// …plus this base.
const TARGET_MEMORY_BASE: u64 = 64 * 1024 * 1024;
/// Concurrent clients that fill the store.
const CREATE_CLIENTS: usize = 64;
const NAMESPACE: &str = "default";
/// Restarts measured; the table shows each.
const RESTARTS: usize = 3;
/// How often readiness is polled after the start.
const POLL: Duration = Duration::from_millis(5);

/// What one restart measured.
#[derive(Debug, Clone)]
pub struct Restart {
    /// From spawning the process to `/readyz` answering 200.
    ready: Duration,
    /// From spawning to the first `limit=500` page of a consistent list.
    first_page: Duration,
    /// From spawning to the whole consistent list.
    full_list: Duration,
    /// Items in the whole list.
    items: usize,
    /// The items' JSON as served, summed.
    item_bytes: usize,
    /// VmRSS once ready (before any list).
    rss_ready: u64,
    /// VmRSS after the lists, one second later.
    rss_after: u64,
}

/// Every restart.
pub struct Results {
    restarts: Vec<Restart>,
}

/// Fills `default` with [`OBJECTS`] ServiceAccounts (a name and two labels each, like the list
/// benchmark's), through the API.
async fn fill(addr: SocketAddr) -> Result<()> {
    super::create_service_accounts(addr, NAMESPACE, OBJECTS, CREATE_CLIENTS, |i| {
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": format!("sa-{i:06}"),
                "labels": {"app": "bench", "shard": (i % 16).to_string()},
            },
        })
    })
    .await
}

/// Stops the server with SIGTERM (a clean shutdown, as an operator's restart) and waits.
fn stop(mut strata: Strata) -> Result<()> {
    let pid = strata.pid().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status()?;
    if !status.success() {
        return Err(format!("kill -TERM {pid} failed").into());
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while strata.child.child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            return Err("strata did not stop within 60 s of SIGTERM".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Starts the server over the filled `dir` and times it.
async fn restart(binary: &Path, dir: &Path) -> Result<(Strata, Restart)> {
    let addr = super::free_addr()?;
    let cmd = super::serve_command(binary, addr, dir);
    let started = Instant::now();
    let mut child = ChildGuard::spawn("strata", cmd, &dir.with_extension("restart.log"))?;
    let deadline = started + Duration::from_secs(120);
    let ready = loop {
        child.ensure_running()?;
        if let Ok((StatusCode::OK, _)) =
            load::request_once(addr, Method::GET, "/readyz", None).await
        {
            break started.elapsed();
        }
        if Instant::now() > deadline {
            return Err(format!(
                "strata not ready 120 s after start; end of its log:\n{}",
                child.log_tail()
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    };
    let strata = Strata { child, addr };
    let rss_ready = procfs::rss(strata.pid())?;
    let path = format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts");
    let (status, body) =
        load::request_once(addr, Method::GET, &format!("{path}?limit=500"), None).await?;
    let first_page = started.elapsed();
    check_list(status, &body, 500)?;
    let (status, body) = load::request_once(addr, Method::GET, &path, None).await?;
    let full_list = started.elapsed();
    // The namespace also holds the ServiceAccount controller's `default`.
    let scan = check_list(status, &body, OBJECTS + 1)?;
    drop(body);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_after = procfs::rss(strata.pid())?;
    Ok((
        strata,
        Restart {
            ready,
            first_page,
            full_list,
            items: scan.0,
            item_bytes: scan.1,
            rss_ready,
            rss_after,
        },
    ))
}

/// Checks a list answer and returns its item count and items' JSON size.
fn check_list(status: StatusCode, body: &[u8], expect: usize) -> Result<(usize, usize)> {
    if status != StatusCode::OK {
        return Err(format!(
            "list: {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        )
        .into());
    }
    let scan = scan_list(body)?;
    if scan.items != expect {
        return Err(format!("list: {} items, expected {expect}", scan.items).into());
    }
    Ok((scan.items, scan.item_bytes))
}

/// Fills a store, then restarts the server [`RESTARTS`] times over it.
pub async fn run(binary: &Path, scratch: &Path) -> Result<Results> {
    let dir = scratch.join("coldstart");
    let strata = start_strata(binary, &dir).await?;
    step(&format!("coldstart: creating {OBJECTS} ServiceAccounts"));
    fill(strata.addr).await?;
    stop(strata)?;
    let mut restarts = Vec::new();
    for n in 1..=RESTARTS {
        step(&format!("coldstart: restart {n} of {RESTARTS}"));
        let (strata, measured) = restart(binary, &dir).await?;
        eprintln!("{measured:?}");
        restarts.push(measured);
        stop(strata)?;
    }
    Ok(Results { restarts })
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The memory target for `item_bytes` of JSON.
fn memory_limit(item_bytes: usize) -> u64 {
    (item_bytes as f64 * TARGET_MEMORY_RATIO) as u64 + TARGET_MEMORY_BASE
}

/// The table: one row per restart.
pub fn table(results: &Results) -> String {
    let mut out = String::from(
        "| restart | /readyz 200 | first page (limit=500) | whole list | objects | JSON as served | \
         RSS ready | RSS after lists | RSS / JSON | RSS − 64 MiB per object |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (i, r) in results.restarts.iter().enumerate() {
        let per_object = r.rss_after.saturating_sub(TARGET_MEMORY_BASE) as f64 / r.items as f64;
        let _ = writeln!(
            out,
            "| {} | {:.0} ms | {:.0} ms | {:.0} ms | {} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.2}× | {:.0} B |",
            i + 1,
            ms(r.ready),
            ms(r.first_page),
            ms(r.full_list),
            r.items,
            mib(r.item_bytes as u64),
            mib(r.rss_ready),
            mib(r.rss_after),
            r.rss_after as f64 / r.item_bytes.max(1) as f64,
            per_object,
        );
    }
    out
}

/// The targets, judged on the slowest restart and the largest memory.
pub fn verdicts(results: &Results) -> Vec<(String, bool)> {
    let Some(worst_start) = results.restarts.iter().map(|r| r.first_page).max() else {
        return Vec::new();
    };
    let worst_rss = results
        .restarts
        .iter()
        .map(|r| r.rss_after.max(r.rss_ready))
        .max()
        .unwrap_or(0);
    let json = results.restarts[0].item_bytes;
    let limit = memory_limit(json);
    let start_pass = worst_start < TARGET_START;
    let memory_pass = worst_rss <= limit;
    vec![
        (
            format!(
                "cold start with {OBJECTS} ServiceAccounts: /readyz 200 and a consistent list's \
                 first page after {:.0} ms at worst (target < {:.0} ms): {}",
                ms(worst_start),
                ms(TARGET_START),
                if start_pass { "PASS" } else { "FAIL" }
            ),
            start_pass,
        ),
        (
            format!(
                "resident memory {:.1} MiB at worst for {:.1} MiB of JSON (target ≤ 2× + 64 MiB \
                 = {:.1} MiB): {}",
                mib(worst_rss),
                mib(json as u64),
                mib(limit),
                if memory_pass { "PASS" } else { "FAIL" }
            ),
            memory_pass,
        ),
    ]
}

/// The section for `docs/benchmarks.md`.
pub fn section(header: &str, results: &Results) -> String {
    let mut out = format!(
        "## {SECTION}\n\nA RocksDB store is filled with {OBJECTS} ServiceAccounts (a name and two \
         labels each) through the API by {CREATE_CLIENTS} clients; the server is stopped with \
         SIGTERM and started again over it {RESTARTS} times. Times run from spawning the \
         process: until `/readyz` first answers 200 (polled every {} ms), until a consistent \
         list (no `resourceVersion`) answers its first `limit=500` page, and until the whole \
         list (one request, no limit) has been read. RSS is VmRSS once ready and one second \
         after the lists; JSON as served is the whole list's items, summed (managedFields \
         included). Per object: RSS after the lists less a 64 MiB base, over the objects.\n\n\
         {header}\n{}\n",
        POLL.as_millis(),
        table(results)
    );
    for (line, _) in verdicts(results) {
        let _ = writeln!(out, "- {line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restart(first_page_ms: u64, rss_mib: u64) -> Restart {
        Restart {
            ready: Duration::from_millis(first_page_ms / 2),
            first_page: Duration::from_millis(first_page_ms),
            full_list: Duration::from_millis(first_page_ms + 100),
            items: OBJECTS,
            item_bytes: 50 * 1024 * 1024,
            rss_ready: rss_mib * 1024 * 1024,
            rss_after: rss_mib * 1024 * 1024,
        }
    }

    #[test]
    fn verdicts_judge_the_worst_restart() {
        let pass = Results {
            restarts: vec![restart(800, 150), restart(900, 160)],
        };
        assert!(verdicts(&pass).iter().all(|(_, ok)| *ok));
        let slow = Results {
            restarts: vec![restart(800, 150), restart(1200, 150)],
        };
        assert_eq!(
            verdicts(&slow)
                .iter()
                .map(|(_, ok)| *ok)
                .collect::<Vec<_>>(),
            vec![false, true]
        );
        // 2 × 50 MiB + 64 MiB = 164 MiB.
        let big = Results {
            restarts: vec![restart(800, 165)],
        };
        assert_eq!(
            verdicts(&big).iter().map(|(_, ok)| *ok).collect::<Vec<_>>(),
            vec![true, false]
        );
    }

    #[test]
    fn table_has_a_row_per_restart() {
        let r = Results {
            restarts: vec![restart(800, 150), restart(900, 160)],
        };
        let t = table(&r);
        assert_eq!(t.lines().count(), 4);
        assert!(t.contains("| 2 | 450 ms | 900 ms | 1000 ms | 100000 | 50.0 MiB |"));
    }
}
