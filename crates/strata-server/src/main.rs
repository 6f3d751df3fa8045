//! The `strata` binary: `strata serve [flags]`, `strata snapshot save|restore FILE [flags]`.

use strata_server::{Config, Server};

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("debug") {
        std::process::exit(debug(&args[1..]).await);
    }
    if args.first().map(String::as_str) == Some("snapshot") {
        std::process::exit(strata_server::snapshot::command(&args[1..]).await);
    }
    let config = match args.split_first() {
        Some((cmd, rest)) if cmd == "serve" => Config::from_args(rest),
        Some((cmd, _)) if cmd == "-h" || cmd == "--help" || cmd == "help" => Err(String::new()),
        Some((cmd, _)) => Err(format!("unknown command {cmd:?}")),
        None => Err(String::new()),
    };
    let config = match config {
        Ok(c) => c,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("strata: {msg}");
            }
            eprint!("{}", strata_server::config::USAGE);
            eprint!("\n{}", strata_server::snapshot::USAGE);
            std::process::exit(2);
        }
    };
    let server = match Server::start(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("strata: {e}");
            std::process::exit(1);
        }
    };
    if let Some(addr) = server.local_addr() {
        tracing::info!(%addr, url = server.url(), "serving");
        // A machine-readable line for scripts and tests that start on port 0.
        println!("strata: listening on {}", server.url());
    }
    server.run(shutdown_signal()).await;
    tracing::info!("stopped");
}

/// `strata debug put-raw --data-dir DIR KEY VALUE`: writes raw bytes into a stopped server's
/// store (for reproducing undecodable objects). `strata debug etcd-put-load ...`: etcd's own
/// write rate through the etcd engine's client, for `cargo xtask bench --only etcd`. Returns
/// the exit code.
async fn debug(args: &[String]) -> i32 {
    let usage = "usage: strata debug put-raw --data-dir DIR KEY VALUE\n       \
                 strata debug etcd-put-load --etcd-servers URL[,URL...] [flags]";
    match args {
        [cmd, rest @ ..] if cmd == "etcd-put-load" => {
            use strata_store_etcd::load;
            let options = match load::Options::parse(rest) {
                Ok(options) => options,
                Err(e) => {
                    eprint!("strata: {e}\n{}", load::USAGE);
                    return 2;
                }
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
        [cmd, flag, dir, key, value] if cmd == "put-raw" && flag == "--data-dir" => {
            match strata_server::put_raw(std::path::Path::new(dir), key, value.as_bytes()).await {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("strata: {e}");
                    1
                }
            }
        }
        _ => {
            eprintln!("{usage}");
            2
        }
    }
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down");
}
