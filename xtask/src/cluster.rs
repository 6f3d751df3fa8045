//! `cargo xtask cluster`: a local cluster to try Strata's replica model, three etcd members
//! and two Strata replicas over them, all on loopback, in the foreground until Ctrl-C. It is
//! for people, not tests: the ports are fixed so the printed URLs stay the same between runs,
//! and the data survives a restart unless `--temp` is given.
//!
//! The members' client URLs are http://127.0.0.1:2379, :22379 and :32379 (peers on 2380,
//! 22380, 32380), the replicas https://127.0.0.1:6443 and :6444. Data and logs go to
//! `./strata-cluster` (or `--dir`, or a temporary directory with `--temp`); arguments after `--`
//! go to both replicas' `strata serve`.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::etcd::Member;
use crate::{cargo, prereq, run_step, step, workspace_root, Result};

/// The etcd members' (client, peer) ports, as etcd's own local-cluster examples lay them out.
const ETCD_PORTS: [(u16, u16); 3] = [(2379, 2380), (22379, 22380), (32379, 32380)];
/// The replicas' listening ports.
const REPLICA_PORTS: [u16; 2] = [6443, 6444];
/// How long the etcd members and then the replicas may take to come up.
const START_LIMIT: Duration = Duration::from_secs(60);
/// How long everything may take to stop after SIGTERM before it is killed.
const STOP_LIMIT: Duration = Duration::from_secs(15);
/// What `strata serve` prints once it serves.
const LISTENING: &str = "strata: listening on ";

/// `cargo xtask cluster` flags.
#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    dir: Option<PathBuf>,
    temp: bool,
    binary: Option<PathBuf>,
    serve_args: Vec<String>,
}

impl Options {
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut options = Options {
            dir: None,
            temp: false,
            binary: None,
            serve_args: Vec::new(),
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--dir" => {
                    options.dir = Some(args.next().ok_or("--dir needs a value")?.into());
                }
                "--temp" => options.temp = true,
                "--strata-binary" => {
                    options.binary =
                        Some(args.next().ok_or("--strata-binary needs a value")?.into());
                }
                "--" => {
                    options.serve_args = args.by_ref().cloned().collect();
                }
                other => return Err(format!("cluster: unknown option {other}")),
            }
        }
        if options.temp && options.dir.is_some() {
            return Err("cluster: --dir and --temp exclude each other".into());
        }
        Ok(options)
    }
}

/// A child process with its log file; stopped (SIGTERM, then SIGKILL) by [`stop_all`].
struct Process {
    name: String,
    child: Child,
    log: PathBuf,
    /// Whether its exit was reported already.
    gone: bool,
}

impl Process {
    fn spawn(name: String, mut command: Command, log: PathBuf) -> Result<Process> {
        let out = File::create(&log)?;
        let err = out.try_clone()?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("could not start {name} ({}): {e}", crate::show(&command)))?;
        Ok(Process {
            name,
            child,
            log,
            gone: false,
        })
    }

    /// Fails, quoting the end of the log, once the process has exited.
    fn ensure_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(format!(
                "{} exited ({status}); end of {}:\n{}",
                self.name,
                self.log.display(),
                tail(&self.log)
            )
            .into()),
        }
    }
}

/// The last lines of a log file.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Stops every process: SIGTERM (replicas first, as they were started last), then SIGKILL for
/// whatever is still running after [`STOP_LIMIT`].
fn stop_all(processes: &mut [Process]) {
    for process in processes.iter_mut().rev() {
        if matches!(process.child.try_wait(), Ok(None)) {
            // `kill` from procps: std has no way to send SIGTERM, and the workspace forbids the
            // `unsafe` a raw libc call needs. If it fails, SIGKILL below still stops the child.
            let _ = Command::new("kill")
                .args(["-TERM", &process.child.id().to_string()])
                .status();
        }
    }
    let deadline = Instant::now() + STOP_LIMIT;
    for process in processes.iter_mut().rev() {
        while matches!(process.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if matches!(process.child.try_wait(), Ok(None)) {
            eprintln!(
                "{} did not stop within {STOP_LIMIT:?}; killing it",
                process.name
            );
            let _ = process.child.kill();
        }
        let _ = process.child.wait();
    }
}

pub fn cluster(options: &Options) -> Result<()> {
    let etcd_binary = crate::etcd::binary()?;
    let binary = match &options.binary {
        Some(binary) if binary.is_file() => binary.clone(),
        Some(binary) => {
            return Err(format!("--strata-binary: {} is not a file", binary.display()).into())
        }
        None => {
            prereq::ensure()?;
            // The same build as `cargo xtask run`, so the two share it.
            run_step(cargo([
                "build",
                "--release",
                "-p",
                "strata-server",
                "--bin",
                "strata",
            ]))?;
            crate::bench::release_binary("strata")?
        }
    };
    let temp = if options.temp {
        Some(
            tempfile::Builder::new()
                .prefix("strata-cluster-")
                .tempdir()?,
        )
    } else {
        None
    };
    let dir = match (&temp, &options.dir) {
        (Some(temp), _) => temp.path().to_path_buf(),
        (None, Some(dir)) => dir.clone(),
        (None, None) => workspace_root().join("strata-cluster"),
    };
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    check_ports_free()?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut processes = Vec::new();
    let started = runtime.block_on(start(&etcd_binary, &binary, &dir, options, &mut processes));
    let result = match started {
        Ok(summary) => {
            println!("{summary}");
            let _ = std::io::stdout().flush();
            runtime.block_on(watch_until_interrupted(&mut processes));
            Ok(())
        }
        Err(e) => Err(e),
    };
    step("stopping the replicas and the etcd members");
    stop_all(&mut processes);
    if temp.is_none() {
        eprintln!(
            "data kept in {}; the next `cargo xtask cluster` starts from it",
            dir.display()
        );
    }
    result
}

/// The members of the local etcd cluster.
fn members() -> Vec<Member> {
    ETCD_PORTS
        .iter()
        .enumerate()
        .map(|(n, &(client_port, peer_port))| Member {
            name: format!("etcd-{}", n + 1),
            client_port,
            peer_port,
        })
        .collect()
}

/// Fails naming the first fixed port something else listens on already.
fn check_ports_free() -> Result<()> {
    let ports = ETCD_PORTS
        .iter()
        .flat_map(|&(client, peer)| [client, peer])
        .chain(REPLICA_PORTS);
    for port in ports {
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            return Err(format!(
                "port {port} on 127.0.0.1 is in use (another `cargo xtask cluster`, an etcd or a \
                 strata?); cluster needs ports {ETCD_PORTS:?} for etcd and {REPLICA_PORTS:?} for \
                 the replicas"
            )
            .into());
        }
    }
    Ok(())
}

/// Starts the members, waits until each is healthy, starts the replicas and waits until each
/// serves; returns what to print. Every started process is pushed to `processes` at once, so
/// the caller stops it whatever happens.
async fn start(
    etcd_binary: &Path,
    strata_binary: &Path,
    dir: &Path,
    options: &Options,
    processes: &mut Vec<Process>,
) -> Result<String> {
    let members = members();
    step(&format!(
        "starting {} etcd members ({})",
        members.len(),
        etcd_binary.display()
    ));
    for member in &members {
        let command = member.command(etcd_binary, &dir.join(&member.name), &members);
        let log = dir.join(format!("{}.log", member.name));
        processes.push(Process::spawn(member.name.clone(), command, log)?);
    }
    for (n, member) in members.iter().enumerate() {
        let process = &mut processes[n];
        crate::etcd::wait_healthy(member.client_addr(), START_LIMIT, || {
            process.ensure_running()
        })
        .await?;
    }
    let endpoints = members
        .iter()
        .map(Member::client_url)
        .collect::<Vec<_>>()
        .join(",");

    step(&format!(
        "starting {} Strata replicas on --etcd-servers {endpoints}",
        REPLICA_PORTS.len()
    ));
    let mut replicas = Vec::new();
    for (n, port) in REPLICA_PORTS.into_iter().enumerate() {
        let name = format!("replica-{}", n + 1);
        let data_dir = dir.join(&name);
        let mut command = Command::new(strata_binary);
        command
            .arg("serve")
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--storage-backend", "etcd", "--etcd-servers", &endpoints])
            .args(&options.serve_args);
        let log = dir.join(format!("{name}.log"));
        processes.push(Process::spawn(name.clone(), command, log.clone())?);
        replicas.push((name, data_dir, log, processes.len() - 1));
    }
    let mut summary = String::from("\ncluster running:\n");
    summary.push_str(&format!("  etcd endpoints: {endpoints}\n"));
    for (name, data_dir, log, index) in &replicas {
        let url = wait_listening(&mut processes[*index]).await?;
        summary.push_str(&format!(
            "  {name}: {url}\n    kubeconfig: {}\n    log: {}\n",
            data_dir.join("admin.kubeconfig").display(),
            log.display()
        ));
    }
    summary.push_str(&format!(
        "  etcd data and logs: {}/etcd-N, {}/etcd-N.log\n\n\
         Try: KUBECONFIG={} kubectl get namespaces\n\
         Ctrl-C stops everything.",
        dir.display(),
        dir.display(),
        replicas
            .first()
            .map(|(_, data_dir, _, _)| data_dir.join("admin.kubeconfig").display().to_string())
            .unwrap_or_default(),
    ));
    Ok(summary)
}

/// Waits until a replica's log says it serves; returns its URL.
async fn wait_listening(process: &mut Process) -> Result<String> {
    let deadline = Instant::now() + START_LIMIT;
    loop {
        process.ensure_running()?;
        let text = std::fs::read_to_string(&process.log).unwrap_or_default();
        if let Some(url) = listening_url(&text) {
            return Ok(url.to_string());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{} did not start serving within {START_LIMIT:?}; end of {}:\n{}",
                process.name,
                process.log.display(),
                tail(&process.log)
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The URL of the `strata: listening on URL` line of a log, if it has one.
fn listening_url(log: &str) -> Option<&str> {
    log.lines()
        .find_map(|line| line.strip_prefix(LISTENING))
        .map(str::trim)
}

/// Runs until Ctrl-C (SIGINT) or SIGTERM, saying so when a process exits on its own (killing
/// an etcd member or a replica by hand is a fair experiment; the rest keeps running).
async fn watch_until_interrupted(processes: &mut [Process]) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let terminated = async {
        match term.as_mut() {
            Some(term) => {
                term.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(terminated);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return,
            () = &mut terminated => return,
            _ = tick.tick() => {}
        }
        for process in processes.iter_mut().filter(|p| !p.gone) {
            if let Ok(Some(status)) = process.child.try_wait() {
                process.gone = true;
                eprintln!(
                    "{} exited ({status}); the others keep running. End of {}:\n{}",
                    process.name,
                    process.log.display(),
                    tail(&process.log)
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn options() {
        assert_eq!(
            Options::parse(&[]).unwrap(),
            Options {
                dir: None,
                temp: false,
                binary: None,
                serve_args: Vec::new()
            }
        );
        let o = Options::parse(&args(
            "--dir /tmp/c --strata-binary /bin/strata -- --insecure-http --dir x",
        ))
        .unwrap();
        assert_eq!(o.dir.as_deref(), Some(Path::new("/tmp/c")));
        assert_eq!(o.binary.as_deref(), Some(Path::new("/bin/strata")));
        assert_eq!(o.serve_args, ["--insecure-http", "--dir", "x"]);
        assert!(Options::parse(&args("--temp")).unwrap().temp);
        for bad in ["--dir", "--temp --dir x", "--fast", "--strata-binary"] {
            assert!(Options::parse(&args(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn members_are_a_three_member_cluster_on_distinct_ports() {
        let members = members();
        assert_eq!(members.len(), 3);
        let mut ports: Vec<u16> = members
            .iter()
            .flat_map(|m| [m.client_port, m.peer_port])
            .chain(REPLICA_PORTS)
            .collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 8);
        assert_eq!(members[0].client_url(), "http://127.0.0.1:2379");
    }

    #[test]
    fn finds_the_listening_line() {
        let log = "INFO opened\nstrata: listening on https://127.0.0.1:6443\nINFO more\n";
        assert_eq!(listening_url(log), Some("https://127.0.0.1:6443"));
        assert_eq!(listening_url("INFO starting\n"), None);
    }
}
