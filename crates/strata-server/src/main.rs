//! The `strata` binary: `strata serve [flags]` (or `strata [flags]`), `strata snapshot
//! save|restore FILE [flags]`, `strata debug ...`. Every flag is parsed by clap; the server's
//! flags are `strata_server::config`'s.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use strata_server::config::{GlobalFlags, LogFormat, ServeFlags, StorageFlags};
use strata_server::config::{SERVE_ABOUT, SERVE_LONG_ABOUT};
use strata_server::Server;

/// Every allocation of the server goes through mimalloc: a write allocates hundreds of small
/// objects on tasks that move between threads, which glibc's allocator serves slowly.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "strata",
    version,
    about = "Strata: a Kubernetes-compatible API server",
    long_about = "Strata: a Kubernetes-compatible API server.\n\n\
                  `strata [FLAGS]` is short for `strata serve [FLAGS]`; the flags below are \
                  serve's.",
    args_conflicts_with_subcommands = true,
    arg_required_else_help = true,
    args_override_self = true,
    disable_help_flag = true,
    disable_version_flag = true,
    propagate_version = true
)]
struct Cli {
    #[command(flatten)]
    serve: ServeFlags,
    #[command(flatten)]
    global: GlobalFlags,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    #[command(display_name = "strata", about = SERVE_ABOUT, long_about = SERVE_LONG_ABOUT)]
    Serve {
        #[command(flatten)]
        flags: Box<ServeFlags>,
    },
    /// Saves a store to a file, or restores a file into an empty store
    #[command(subcommand, long_about = SNAPSHOT_LONG_ABOUT)]
    Snapshot(SnapshotCommand),
    /// Tools for developers: raw writes into a stopped server's store, etcd's write rate
    #[command(subcommand)]
    Debug(DebugCommand),
}

/// What `strata snapshot --help` says under the usage line.
const SNAPSHOT_LONG_ABOUT: &str = "\
save writes every key of the store (objects and the cluster's secrets), read at one revision, to
FILE; it works while a server runs on the store. restore writes FILE into an EMPTY store (a fresh
data directory or etcd prefix), after verifying its checksum; start a server on it afterwards.
Objects keep their uid, creationTimestamp, managedFields, finalizers and labels; their
resourceVersions become the target's revisions.";

#[derive(Subcommand, Debug)]
enum SnapshotCommand {
    /// Writes every key of the store, read at one revision, to FILE
    #[command(long_about = SNAPSHOT_LONG_ABOUT)]
    Save(SnapshotArgs),
    /// Writes FILE, after verifying it, into an empty store
    #[command(long_about = SNAPSHOT_LONG_ABOUT)]
    Restore(SnapshotArgs),
}

#[derive(Args, Debug)]
struct SnapshotArgs {
    /// The snapshot file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    #[command(flatten)]
    storage: StorageFlags,
}

#[derive(Subcommand, Debug)]
enum DebugCommand {
    /// Writes VALUE's bytes under KEY in a stopped server's store (to reproduce undecodable
    /// objects)
    PutRaw {
        /// The stopped server's data directory.
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
        /// The store key, such as /registry/serviceaccounts/default/default.
        key: String,
        /// The bytes to write, as given.
        #[arg(allow_hyphen_values = true)]
        value: String,
    },
    /// Measures etcd's own write rate through the etcd engine's client; prints one JSON line
    /// (`cargo xtask bench --only etcd`)
    EtcdPutLoad(EtcdPutLoad),
}

/// The flags of `strata debug etcd-put-load`.
#[derive(Args, Debug)]
struct EtcdPutLoad {
    /// The etcd members' client URLs, comma separated.
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',', action = ArgAction::Set, required = true)]
    etcd_servers: Vec<String>,
    /// Writers, each sending its next write when the last is answered.
    #[arg(long, value_name = "N", default_value = "64", value_parser = positive)]
    clients: usize,
    /// gRPC connections the writers share (at most one per writer).
    #[arg(long, value_name = "N", default_value = "1", value_parser = positive)]
    connections: usize,
    /// Seconds measured, after the warm-up.
    #[arg(long, value_name = "S", default_value = "5", value_parser = seconds)]
    seconds: Duration,
    /// Seconds of writes before the measured ones (0 for none).
    #[arg(long, value_name = "S", default_value = "1", value_parser = seconds_or_zero)]
    warmup: Duration,
    /// Bytes per value.
    #[arg(long, value_name = "N", default_value = "1024", value_parser = positive)]
    value_bytes: usize,
    /// put (a plain put) or create (Strata's create transaction).
    #[arg(
        long,
        value_name = "OP",
        default_value = "put",
        hide_possible_values = true
    )]
    op: LoadOp,
    /// The key prefix written under.
    #[arg(long, value_name = "KEY", default_value = "/bench-put")]
    prefix: String,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LoadOp {
    Put,
    Create,
}

/// A positive count.
fn positive(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("expected a positive whole number".into()),
    }
}

/// A number of seconds, fractions allowed, under a day.
fn seconds_within(value: &str, zero_ok: bool) -> Result<Duration, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && (*s > 0.0 || (zero_ok && *s == 0.0)) && *s < 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| "expected a number of seconds under a day".into())
}

fn seconds(value: &str) -> Result<Duration, String> {
    seconds_within(value, false)
}

fn seconds_or_zero(value: &str) -> Result<Duration, String> {
    seconds_within(value, true)
}

#[tokio::main]
async fn main() {
    // Help, version and bad flags exit here, with clap's message and code (2 for bad usage).
    let cli = Cli::parse();
    let flags = match cli.command {
        None => cli.serve,
        Some(Command::Serve { flags }) => *flags,
        Some(Command::Snapshot(command)) => {
            init_logging(LogFormat::Text, 0);
            std::process::exit(snapshot(command).await);
        }
        Some(Command::Debug(command)) => {
            init_logging(LogFormat::Text, 0);
            std::process::exit(debug(command).await);
        }
    };
    let config = match flags.into_config() {
        Ok(config) => config,
        Err(e) => e
            .format(&mut <Cli as clap::CommandFactory>::command())
            .exit(),
    };
    init_logging(config.log_format, config.verbosity);
    log_settings(&config);
    let server = match Server::start(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("strata: {e}");
            std::process::exit(1);
        }
    };
    let stop = shutdown_signal();
    if let Some(addr) = server.local_addr() {
        tracing::info!(%addr, url = server.url(), "serving");
        // A machine-readable line for scripts and tests that start on port 0.
        println!("strata: listening on {}", server.url());
    }
    server.run(stop).await;
    tracing::info!("stopped");
}

/// The log filter of a klog verbosity (`-v`): 0 to 2 the server's own INFO lines, 3 and 4 the
/// request lines too (DEBUG events of `strata_http::httplog`), 5 and 6 every DEBUG line of
/// Strata's crates, 7 and up TRACE for Strata's crates and DEBUG for the libraries.
fn verbosity_filter(v: u8) -> String {
    match v {
        0..=2 => "info".into(),
        3..=4 => format!("info,{}=debug", strata_http::httplog::TARGET),
        5..=6 => "info,strata=debug".into(),
        _ => "debug,strata=trace".into(),
    }
}

/// Logs to stderr in `format`, at the levels `RUST_LOG` names when it is set (and valid),
/// otherwise at those of the verbosity `v`.
fn init_logging(format: LogFormat, v: u8) {
    use tracing_subscriber::EnvFilter;
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|directives| !directives.trim().is_empty())
        .and_then(|directives| EnvFilter::try_new(directives).ok())
        .unwrap_or_else(|| EnvFilter::new(verbosity_filter(v)));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Colours only on a terminal: a log file or collector gets plain text.
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        // The event's message and fields at the top level of each object, beside `timestamp`,
        // `level` and `target`.
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// The startup line: the version, the store (its engine and where it is), the address to
/// serve on, the data directory, the feature gates and the log verbosity.
fn log_settings(config: &strata_server::Config) {
    use strata_server::Backend;
    let gates = config
        .feature_gates
        .iter()
        .map(|(gate, on)| format!("{gate}={on}"))
        .collect::<Vec<_>>()
        .join(",");
    let backend = match config.backend {
        Backend::RocksDb => "rocksdb",
        Backend::Memory => "memory",
        Backend::Etcd => "etcd",
    };
    let store = match config.backend {
        Backend::RocksDb => config.data_dir.join("store").display().to_string(),
        Backend::Memory => "memory (lost at exit)".into(),
        Backend::Etcd => format!(
            "{} under {}",
            config.etcd_servers.join(","),
            config.etcd_prefix
        ),
    };
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        backend,
        store = %store,
        etcd_servers = %config.etcd_servers.join(","),
        listen = %config.listen,
        data_dir = %config.data_dir.display(),
        feature_gates = %gates,
        verbosity = config.verbosity,
        "starting"
    );
}

/// `strata snapshot save|restore FILE [storage flags]`; returns the exit code.
async fn snapshot(command: SnapshotCommand) -> i32 {
    let (restore, args) = match command {
        SnapshotCommand::Save(args) => (false, args),
        SnapshotCommand::Restore(args) => (true, args),
    };
    let config = args.storage.into_config();
    strata_server::snapshot::run(restore, &args.file, &config).await
}

/// `strata debug put-raw --data-dir DIR KEY VALUE`: writes raw bytes into a stopped server's
/// store (for reproducing undecodable objects). `strata debug etcd-put-load ...`: etcd's own
/// write rate through the etcd engine's client, for `cargo xtask bench --only etcd`. Returns
/// the exit code.
async fn debug(command: DebugCommand) -> i32 {
    match command {
        DebugCommand::EtcdPutLoad(flags) => {
            use strata_store_etcd::load;
            let options = load::Options {
                endpoints: flags
                    .etcd_servers
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect(),
                connections: flags.connections.min(flags.clients),
                clients: flags.clients,
                warmup: flags.warmup,
                measure: flags.seconds,
                value_bytes: flags.value_bytes,
                op: match flags.op {
                    LoadOp::Put => load::Op::Put,
                    LoadOp::Create => load::Op::Create,
                },
                prefix: flags.prefix,
            };
            match load::run(&options).await {
                Ok(report) => {
                    println!("{}", report.to_json());
                    0
                }
                Err(e) => {
                    eprintln!("strata: {e}");
                    1
                }
            }
        }
        DebugCommand::PutRaw {
            data_dir,
            key,
            value,
        } => match strata_server::put_raw(&data_dir, &key, value.as_bytes()).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("strata: {e}");
                1
            }
        },
    }
}

/// Installs the SIGINT and SIGTERM handlers now (before the listening line is printed, so a
/// signal sent as soon as it is seen stops the server cleanly instead of killing it) and returns
/// a future that completes on the first of them.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let (mut int, mut term) = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let int = async {
                match int.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let term = async {
                match term.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = int => {},
                _ = term => {},
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definitions_are_consistent() {
        Cli::command().debug_assert();
    }
}
