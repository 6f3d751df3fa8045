//! The `strata` command line, run as the real binary: `--help` groups the flags as
//! kube-apiserver does, `--version`, bad flags and values exit 2 naming the flag, `STRATA_*`
//! environment variables set flags (observed on a started server), `--log-format json`
//! writes the server's log lines as JSON objects, `-v=3` adds one line per request, and the
//! startup lines name the store, the address, the data directory and the feature gates.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{run_with_timeout, strata_bin, Finished, Http};

/// Runs `strata ARGS` to its end with `env` added to its environment.
fn strata(args: &[&str], env: &[(&str, &str)], dir: &Path) -> Finished {
    let mut cmd = Command::new(strata_bin());
    cmd.args(args).current_dir(dir);
    for (name, value) in env {
        cmd.env(name, value);
    }
    run_with_timeout(&mut cmd, dir, Duration::from_secs(30))
}

/// The headings of kube-apiserver's flag groups that Strata has flags in, in its order.
const HEADINGS: [&str; 8] = [
    "Generic flags:",
    "Etcd flags:",
    "Secure serving flags:",
    "Authentication flags:",
    "Authorization flags:",
    "Logs flags:",
    "Misc flags:",
    "Global flags:",
];

/// Checks that `help` has every heading in order, each flag of `flags` under the heading
/// named with it, and the environment variables.
fn assert_grouped(help: &str, flags: &[(&str, &str)]) {
    let mut starts = Vec::new();
    for heading in HEADINGS {
        let at = help
            .find(&format!("\n{heading}\n"))
            .unwrap_or_else(|| panic!("no {heading:?} heading in\n{help}"));
        if let Some(previous) = starts.last() {
            assert!(at > *previous, "{heading:?} out of order in\n{help}");
        }
        starts.push(at);
    }
    for (flag, heading) in flags {
        let at = help
            .find(&format!("  {flag} "))
            .or_else(|| help.find(&format!("  {flag}\n")))
            .or_else(|| help.find(&format!("  {flag}[")))
            .unwrap_or_else(|| panic!("{flag} not in\n{help}"));
        let index = HEADINGS.iter().position(|h| h == heading).unwrap();
        let end = starts.get(index + 1).copied().unwrap_or(help.len());
        assert!(
            starts[index] < at && at < end,
            "{flag} is not under {heading:?} in\n{help}"
        );
    }
    for variable in [
        "STRATA_DATA_DIR",
        "STRATA_ETCD_SERVERS",
        "STRATA_LOG_FORMAT",
    ] {
        assert!(help.contains(variable), "{variable} not in\n{help}");
    }
}

#[test]
fn help_lists_every_group_and_flag_and_version_prints_it() {
    let work = tempfile::tempdir().unwrap();
    let flags = [
        ("--feature-gates <NAME=BOOL[,...]>", "Generic flags:"),
        ("--data-dir <DIR>", "Generic flags:"),
        ("--storage-backend <ENGINE>", "Etcd flags:"),
        ("--etcd-servers <URL[,URL...]>", "Etcd flags:"),
        ("--history-retention <DURATION>", "Etcd flags:"),
        ("--encryption-provider-config <FILE>", "Etcd flags:"),
        ("--listen <ADDR>", "Secure serving flags:"),
        ("--insecure-http[=<BOOL>]", "Secure serving flags:"),
        ("--tls-cert-file <FILE>", "Secure serving flags:"),
        (
            "--http2-max-streams-per-connection <N>",
            "Secure serving flags:",
        ),
        ("--anonymous-auth <BOOL>", "Authentication flags:"),
        ("--token-auth-file <FILE>", "Authentication flags:"),
        ("--authorization-mode <MODE>", "Authorization flags:"),
        ("--log-format <FORMAT>", "Logs flags:"),
        ("-v, --v <LEVEL>", "Logs flags:"),
        ("--watch-buffer-size <N>", "Misc flags:"),
        ("--version", "Global flags:"),
    ];
    for args in [&["--help"][..], &["serve", "--help"], &["help", "serve"]] {
        let run = strata(args, &[], work.path());
        assert_eq!(run.status.code(), Some(0), "{args:?}: {run:?}");
        assert_grouped(&run.stdout, &flags);
    }
    let run = strata(&["--help"], &[], work.path());
    for command in ["serve", "snapshot", "debug"] {
        assert!(
            run.stdout.contains(&format!("\n  {command} ")),
            "{command}: {run:?}"
        );
    }
    // The storage flags of snapshot, under the same headings.
    let run = strata(&["snapshot", "save", "--help"], &[], work.path());
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    assert!(
        run.stdout.contains("Usage: strata snapshot save"),
        "{run:?}"
    );
    assert!(run.stdout.contains("\nEtcd flags:\n"), "{run:?}");
    assert!(!run.stdout.contains("--listen"), "{run:?}");

    let version = format!("strata {}\n", env!("CARGO_PKG_VERSION"));
    for args in [&["--version"][..], &["serve", "--version"]] {
        let run = strata(args, &[], work.path());
        assert_eq!(run.status.code(), Some(0), "{args:?}: {run:?}");
        assert_eq!(run.stdout, version, "{args:?}");
    }
}

#[test]
fn bad_flags_and_values_exit_2_naming_the_flag() {
    let work = tempfile::tempdir().unwrap();
    for (args, env, expected) in [
        (
            &["serve", "--history-retention", "5x"][..],
            &[][..],
            "error: invalid value '5x' for '--history-retention <DURATION>': expected a duration",
        ),
        (
            &["serve", "--storage-backend=mysql"],
            &[],
            "error: invalid value 'mysql' for '--storage-backend <ENGINE>'",
        ),
        (
            &["serve", "--feature-gates", "NoSuchGate=true"],
            &[],
            "unrecognized feature gate: NoSuchGate",
        ),
        (
            &["serve", "--anonymous-auth=perhaps"],
            &[],
            "error: invalid value 'perhaps' for '--anonymous-auth <BOOL>'",
        ),
        (
            &["serve", "--bogus"],
            &[],
            "error: unexpected argument '--bogus' found",
        ),
        (
            &["serve", "--tls-cert-file", "/c"],
            &[],
            "--tls-private-key-file <FILE>",
        ),
        (
            &[
                "serve",
                "--insecure-http",
                "--tls-cert-file=/c",
                "--tls-private-key-file=/k",
            ],
            &[],
            "error: the argument '--insecure-http' cannot be used with '--tls-cert-file <FILE>'",
        ),
        (
            &["serve"],
            &[("STRATA_WATCH_BUFFER_SIZE", "none")],
            "error: invalid value 'none' for '--watch-buffer-size <N>'",
        ),
        (
            &["frobnicate"],
            &[],
            "error: unrecognized subcommand 'frobnicate'",
        ),
        (
            &["debug", "etcd-put-load"],
            &[],
            "--etcd-servers <URL[,URL...]>",
        ),
    ] {
        let run = strata(args, env, work.path());
        assert_eq!(run.status.code(), Some(2), "{args:?}: {run:?}");
        assert!(run.stderr.contains(expected), "{args:?}: {run:?}");
        assert!(run.stdout.is_empty(), "{args:?}: {run:?}");
    }
    // Without arguments: the help, on stderr, and 2.
    let run = strata(&[], &[], work.path());
    assert_eq!(run.status.code(), Some(2), "{run:?}");
    assert!(run.stderr.contains("Generic flags:"), "{run:?}");
    assert!(!work.path().join("strata-data").exists());
}

/// A started server: its stdout's listening line read, its stderr going to a file.
struct Started {
    child: std::process::Child,
    /// The URL of the listening line.
    url: String,
}

/// Starts `strata ARGS` with `env`, logs at `info` into `log`, and waits for its listening
/// line.
fn start(args: &[&str], env: &[(&str, &str)], log: &Path) -> Started {
    let mut cmd = Command::new(strata_bin());
    cmd.args(args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap());
    for (name, value) in env {
        cmd.env(name, value);
    }
    let mut child = cmd.spawn().expect("start strata");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("strata: listening on ")
        .unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "no listening line: {line:?}\nlog:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        })
        .to_string();
    Started { child, url }
}

impl Started {
    /// Stops the server with SIGTERM, as an operator would, and waits for it: it exits 0.
    fn terminate(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        assert!(exit.success(), "{exit:?}");
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on at the moment.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `strata serve` configured by environment variables alone: it listens where STRATA_LISTEN
/// says, keeps its data where STRATA_DATA_DIR says, serves plain HTTP to anonymous users as
/// the other variables say; a flag on the command line wins over its variable.
#[tokio::test]
async fn environment_variables_set_flags_and_the_command_line_wins() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("from-env");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let env = [
        ("STRATA_LISTEN", listen.as_str()),
        ("STRATA_DATA_DIR", data.to_str().unwrap()),
        ("STRATA_STORAGE_BACKEND", "memory"),
        ("STRATA_INSECURE_HTTP", "true"),
        ("STRATA_ANONYMOUS_AUTH", "true"),
        ("STRATA_AUTHORIZATION_MODE", "AlwaysAllow"),
        ("STRATA_FEATURE_GATES", "APIResponseCompression=false"),
    ];
    let server = start(&["serve"], &env, &work.path().join("env.log"));
    assert_eq!(server.url, format!("http://{listen}"));
    assert!(data.join("admin.kubeconfig").exists());
    let http = Http::to(&listen);
    // Anonymous and allowed: the variables turned on anonymous access and AlwaysAllow.
    let r = http.get("/api/v1/namespaces/default/serviceaccounts").await;
    assert_eq!(r.code(), 200, "{r:?}");
    // Compression off (it is on by default): a list is not gzipped although the client
    // accepts gzip.
    let r = http
        .send(
            "GET",
            "/api/v1/namespaces",
            None,
            &[("accept-encoding", "gzip")],
        )
        .await;
    assert_eq!(r.code(), 200, "{r:?}");
    assert_eq!(r.header("content-encoding"), "", "{r:?}");
    server.terminate();

    // `strata FLAGS` is `strata serve FLAGS`; the command line's --listen wins over
    // STRATA_LISTEN, whose bad value is then never read.
    let env = [
        ("STRATA_LISTEN", "not an address"),
        ("STRATA_DATA_DIR", data.to_str().unwrap()),
        ("STRATA_STORAGE_BACKEND", "memory"),
    ];
    let server = start(
        &["--listen", "127.0.0.1:0", "--insecure-http"],
        &env,
        &work.path().join("flags.log"),
    );
    let addr = server.url.strip_prefix("http://").unwrap().to_string();
    assert_ne!(addr, listen);
    // Not anonymous this time: the variable is unset and the default is false.
    assert_eq!(Http::to(&addr).get("/api").await.code(), 401);
    server.terminate();
}

/// `--log-format json`: every line the server logs from start to stop is one JSON object with
/// its time, level, target and message, the event's fields beside them. The default stays text.
#[tokio::test]
async fn log_format_json_writes_json_lines() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("json.log");
    let data = work.path().join("data");
    let server = start(
        &[
            "serve",
            "--listen=127.0.0.1:0",
            "--insecure-http",
            "--storage-backend=memory",
            "--data-dir",
            data.to_str().unwrap(),
            "--log-format",
            "json",
        ],
        &[],
        &log,
    );
    let addr = server.url.strip_prefix("http://").unwrap().to_string();
    server.terminate();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?} in\n{text}")))
        .collect();
    for line in &lines {
        for key in ["timestamp", "level", "target", "message"] {
            assert!(line.get(key).is_some(), "{key} in {line}");
        }
    }
    let serving = lines
        .iter()
        .find(|l| l["message"] == "serving")
        .unwrap_or_else(|| panic!("no serving line in\n{text}"));
    assert_eq!(serving["level"], "INFO");
    assert_eq!(serving["addr"], addr.as_str(), "{serving}");
    assert!(
        lines.iter().any(|l| l["message"] == "stopped"),
        "no stopped line in\n{text}"
    );

    // The same start without the flag logs text: not one line is JSON.
    let log = work.path().join("text.log");
    let server = start(
        &[
            "serve",
            "--listen=127.0.0.1:0",
            "--insecure-http",
            "--storage-backend=memory",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        &[],
        &log,
    );
    server.terminate();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("serving"), "{text}");
    assert!(
        text.lines()
            .all(|l| serde_json::from_str::<Value>(l).is_err()),
        "{text}"
    );
    // Plain text when not on a terminal: no colour escapes.
    assert!(!text.contains('\u{1b}'), "{text:?}");
}

/// The JSON log lines of `log`, each parsed.
fn json_lines(log: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?} in\n{text}")))
        .collect()
}

/// The request lines among `lines`.
fn request_lines(lines: &[Value]) -> Vec<&Value> {
    lines
        .iter()
        .filter(|l| l["target"] == "strata_http::httplog")
        .collect()
}

/// Sends `method path` as the bearer of `token` with a user agent of its own; returns the code
/// and the response's audit ID.
async fn send_as(
    http: &Http,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, String) {
    let bytes = body.map(|b| serde_json::to_vec(b).unwrap());
    let auth = format!("Bearer {token}");
    let r = http
        .send(
            method,
            path,
            bytes.as_deref(),
            &[
                ("authorization", auth.as_str()),
                ("content-type", "application/json"),
                ("user-agent", "cli-test/1.0"),
            ],
        )
        .await;
    let audit_id = r.header("audit-id").to_string();
    assert!(!audit_id.is_empty(), "{r:?}");
    (r.code(), audit_id)
}

/// `--v=3 --log-format json`: a create, a get and a get of a missing object each make exactly
/// one request line (kube-apiserver's `HTTP` line) with the verb, the URI, the authenticated
/// user, the status, the latency, the response size, the user agent, the source address and
/// the audit ID the response carried. `RUST_LOG` is unset, so the verbosity alone decides.
#[tokio::test]
async fn v3_logs_one_line_per_request() {
    let work = tempfile::tempdir().unwrap();
    let tokens = work.path().join("tokens.csv");
    std::fs::write(&tokens, "alice-token,alice,uid-alice,\"devs\"\n").unwrap();
    let log = work.path().join("v3.log");
    let data = work.path().join("data");
    let server = start(
        &[
            "serve",
            "--listen=127.0.0.1:0",
            "--insecure-http",
            "--storage-backend=memory",
            "--data-dir",
            data.to_str().unwrap(),
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--authorization-mode=AlwaysAllow",
            "--log-format=json",
            "--v=3",
        ],
        &[("RUST_LOG", "")],
        &log,
    );
    let addr = server.url.strip_prefix("http://").unwrap().to_string();
    let http = Http::to(&addr);
    let cms = "/api/v1/namespaces/default/configmaps";
    let cm = serde_json::json!({"metadata": {"name": "logged"}, "data": {"k": "v"}});
    let created = send_as(&http, "alice-token", "POST", cms, Some(&cm)).await;
    assert_eq!(created.0, 201);
    let got = send_as(&http, "alice-token", "GET", &format!("{cms}/logged"), None).await;
    assert_eq!(got.0, 200);
    let missing = send_as(
        &http,
        "alice-token",
        "GET",
        &format!("{cms}/missing?pretty=false"),
        None,
    )
    .await;
    assert_eq!(missing.0, 404);
    server.terminate();

    let lines = json_lines(&log);
    let requests = request_lines(&lines);
    assert_eq!(requests.len(), 3, "{requests:#?}");
    for (line, (verb, uri, code, audit_id)) in requests.iter().zip([
        ("POST", cms.to_string(), 201, &created.1),
        ("GET", format!("{cms}/logged"), 200, &got.1),
        (
            "GET",
            format!("{cms}/missing?pretty=false"),
            404,
            &missing.1,
        ),
    ]) {
        assert_eq!(line["message"], "HTTP", "{line}");
        assert_eq!(line["level"], "DEBUG", "{line}");
        assert_eq!(line["verb"], verb, "{line}");
        assert_eq!(line["uri"], uri.as_str(), "{line}");
        assert_eq!(line["status"], code, "{line}");
        assert_eq!(line["user"], "alice", "{line}");
        assert_eq!(line["user_agent"], "cli-test/1.0", "{line}");
        assert_eq!(line["audit_id"], audit_id.as_str(), "{line}");
        let src: std::net::SocketAddr = line["src_ip"]
            .as_str()
            .unwrap_or_else(|| panic!("src_ip in {line}"))
            .parse()
            .unwrap();
        assert!(src.ip().is_loopback(), "{line}");
        assert!(line["latency"].is_string(), "{line}");
        let seconds = line["latency_seconds"].as_f64().unwrap();
        assert!((0.0..30.0).contains(&seconds), "{line}");
        assert!(line["bytes"].as_u64().unwrap() > 0, "{line}");
    }

    // The same server at its default verbosity (and at 2) logs no request line.
    for extra in [None, Some("--v=2")] {
        let log = work.path().join("default.log");
        let mut args = vec![
            "serve",
            "--listen=127.0.0.1:0",
            "--insecure-http",
            "--storage-backend=memory",
            "--data-dir",
            data.to_str().unwrap(),
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--authorization-mode=AlwaysAllow",
            "--log-format=json",
        ];
        args.extend(extra);
        let server = start(&args, &[("RUST_LOG", "")], &log);
        let http = Http::to(server.url.strip_prefix("http://").unwrap());
        assert_eq!(
            send_as(&http, "alice-token", "POST", cms, Some(&cm))
                .await
                .0,
            201
        );
        assert_eq!(
            send_as(&http, "alice-token", "GET", &format!("{cms}/nope"), None)
                .await
                .0,
            404
        );
        server.terminate();
        let lines = json_lines(&log);
        assert!(
            lines.iter().any(|l| l["message"] == "serving"),
            "{lines:#?}"
        );
        assert_eq!(request_lines(&lines), Vec::<&Value>::new(), "{extra:?}");
    }
}

/// The first lines of a server name what it runs on: the store (its engine, and its directory
/// or etcd endpoints), the address it listens on, the data directory and every feature gate.
/// On RocksDB by default, on a throwaway etcd with `STRATA_TEST_STORAGE=etcd`.
#[tokio::test]
async fn startup_lines_name_store_address_data_dir_and_gates() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let log = work.path().join("start.log");
    let etcd = match crate::common::storage() {
        crate::common::Storage::Etcd => {
            Some(strata_store_etcd::testing::TestEtcd::start().unwrap())
        }
        crate::common::Storage::RocksDb => None,
    };
    let mut args = vec![
        "serve".to_string(),
        "--listen=127.0.0.1:0".into(),
        "--insecure-http".into(),
        "--data-dir".into(),
        data.to_str().unwrap().into(),
        "--feature-gates=WatchList=false".into(),
        "--log-format=json".into(),
    ];
    if let Some(etcd) = &etcd {
        args.extend([
            "--storage-backend=etcd".to_string(),
            format!("--etcd-servers={}", etcd.url),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = start(&args, &[], &log);
    let addr = server.url.strip_prefix("http://").unwrap().to_string();
    server.terminate();
    let lines = json_lines(&log);
    let find = |message: &str| {
        lines
            .iter()
            .find(|l| l["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} line in {lines:#?}"))
    };
    let starting = find("starting");
    assert_eq!(starting["listen"], "127.0.0.1:0", "{starting}");
    assert_eq!(starting["data_dir"], data.to_str().unwrap(), "{starting}");
    assert_eq!(
        starting["feature_gates"],
        "APIResponseCompression=true,AllowUnsafeMalformedObjectDeletion=false,\
         CBORServingAndStorage=false,WatchList=false",
        "{starting}"
    );
    assert_eq!(starting["verbosity"], 0, "{starting}");
    match &etcd {
        Some(etcd) => {
            assert_eq!(starting["backend"], "etcd", "{starting}");
            assert_eq!(starting["etcd_servers"], etcd.url.as_str(), "{starting}");
            let connected = find("opened the etcd store");
            assert_eq!(connected["endpoints"], etcd.url.as_str(), "{connected}");
            assert_eq!(connected["prefix"], "/registry", "{connected}");
        }
        None => {
            let store = data.join("store");
            assert_eq!(starting["backend"], "rocksdb", "{starting}");
            assert_eq!(starting["store"], store.to_str().unwrap(), "{starting}");
            let opened = find("opened the RocksDB store");
            assert_eq!(opened["path"], store.to_str().unwrap(), "{opened}");
        }
    }
    // The listening address, once bound (the flag asked for port 0).
    let serving = find("serving");
    assert_eq!(serving["addr"], addr.as_str(), "{serving}");
}
