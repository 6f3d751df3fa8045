//! `cargo xtask bench`: whole-server load. Starts release `strata` servers (and, for the
//! foundation figures, the hello server) as child processes, drives them with the load
//! generators in `load` and the submodules, prints markdown tables and rewrites the sections of
//! `docs/benchmarks.md` it measured. The etcd part also starts etcd (`/usr/bin/etcd`).
//! Micro-benchmarks of hot paths are Criterion's job, not
//! this one.

mod coldstart;
mod crd;
mod etcd;
mod formats;
mod lists;
mod metrics;
mod procfs;
mod updates;
mod watch;

use std::fmt::Write as _;
use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hyper::{Method, StatusCode};

use crate::load::{self, Outcome, Scenario, Workload};
use crate::{cargo, prereq, run_step, step, workspace_root, Result};

const CONCURRENCY: [usize; 2] = [1, 64];
const WARMUP: Duration = Duration::from_secs(1);
const SECTION: &str = "Foundation";
const LISTS_AND_WATCH: &str = "Lists and watch";
const LISTS: &str = "Lists";
const WATCH: &str = "Watch fan-out";
/// Set in the re-executed release build, so it never re-executes again.
const RELEASE_MARKER: &str = "STRATA_XTASK_BENCH_RELEASE";
/// Where the list and watch benchmarks put their objects.
const NAMESPACE: &str = "bench";

/// `cargo xtask bench` flags.
#[derive(Debug)]
pub struct Options {
    seconds: u64,
    only_ceiling: bool,
    /// A `strata` binary to measure instead of building one from this tree.
    binary: Option<PathBuf>,
    parts: Parts,
    list_sizes: Vec<usize>,
    watch: watch::Plan,
    write: bool,
    check: bool,
    /// As typed, for the command line recorded in the report.
    raw: Vec<String>,
}

/// Which benchmarks run (`--only`); all by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Parts {
    foundation: bool,
    lists: bool,
    watch: bool,
    updates: bool,
    formats: bool,
    crd: bool,
    /// What the request metrics cost get throughput.
    metrics: bool,
    /// Restart with 100,000 stored objects: time to ready, resident memory.
    coldstart: bool,
    /// Only when asked for: it needs etcd installed.
    etcd: bool,
}

impl Options {
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut options = Options {
            seconds: 5,
            only_ceiling: false,
            binary: None,
            parts: Parts {
                foundation: true,
                lists: true,
                watch: true,
                updates: true,
                formats: true,
                crd: true,
                metrics: true,
                coldstart: true,
                etcd: false,
            },
            list_sizes: vec![10_000, lists::TARGET_OBJECTS],
            watch: watch::Plan {
                watchers: watch::TARGET_WATCHERS,
                rate: watch::TARGET_RATE,
                seconds: 10,
            },
            write: true,
            check: false,
            raw: args.to_vec(),
        };
        let mut only: Option<Parts> = None;
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |flag: &str| args.next().ok_or(format!("{flag} needs a value"));
            match arg.as_str() {
                "--seconds" => options.seconds = positive("--seconds", value("--seconds")?)?,
                "--only-ceiling" => options.only_ceiling = true,
                "--strata-binary" => {
                    options.binary = Some(PathBuf::from(value("--strata-binary")?));
                }
                "--only" => {
                    let parts = only.get_or_insert(Parts {
                        foundation: false,
                        lists: false,
                        watch: false,
                        updates: false,
                        formats: false,
                        crd: false,
                        metrics: false,
                        coldstart: false,
                        etcd: false,
                    });
                    for part in value("--only")?.split(',') {
                        match part {
                            "foundation" => parts.foundation = true,
                            "lists" => parts.lists = true,
                            "watch" => parts.watch = true,
                            "updates" => parts.updates = true,
                            "formats" => parts.formats = true,
                            "crd" => parts.crd = true,
                            "metrics" => parts.metrics = true,
                            "coldstart" => parts.coldstart = true,
                            "etcd" => parts.etcd = true,
                            other => {
                                return Err(format!(
                                    "--only: unknown part {other:?} \
                                     (foundation, lists, watch, updates, formats, crd, metrics, coldstart, etcd)"
                                ))
                            }
                        }
                    }
                }
                "--list-sizes" => {
                    options.list_sizes = value("--list-sizes")?
                        .split(',')
                        .map(|n| positive("--list-sizes", n))
                        .collect::<Result<_, _>>()?;
                }
                "--watchers" => {
                    options.watch.watchers = positive("--watchers", value("--watchers")?)?
                }
                "--rate" => options.watch.rate = positive("--rate", value("--rate")?)?,
                "--watch-seconds" => {
                    options.watch.seconds = positive("--watch-seconds", value("--watch-seconds")?)?;
                }
                "--no-write" => options.write = false,
                "--check" => options.check = true,
                other => return Err(format!("bench: unknown option {other}")),
            }
        }
        if let Some(only) = only {
            options.parts = only;
        }
        if options.only_ceiling {
            if options.parts.lists
                || options.parts.watch
                || options.parts.updates
                || options.parts.formats
                || options.parts.crd
                || options.parts.metrics
                || options.parts.coldstart
                || options.parts.etcd
            {
                if only.is_some() {
                    return Err("--only-ceiling measures the foundation part only".into());
                }
                options.parts = Parts {
                    foundation: true,
                    lists: false,
                    watch: false,
                    updates: false,
                    formats: false,
                    crd: false,
                    metrics: false,
                    coldstart: false,
                    etcd: false,
                };
            }
            options.parts.foundation = true;
        }
        Ok(options)
    }
}

fn positive<T: std::str::FromStr + PartialOrd + Default>(
    flag: &str,
    value: &str,
) -> Result<T, String> {
    value
        .parse()
        .ok()
        .filter(|n| *n > T::default())
        .ok_or_else(|| format!("{flag}: not a positive number: {value}"))
}

/// A target's line in the report, and whether it was met.
type Verdict = (String, bool);

/// One row of the results table.
struct Row {
    scenario: &'static str,
    clients: usize,
    outcome: Outcome,
}

/// A target from the design: `scenario` at `clients` reaches `fraction` of the ceiling.
struct Target {
    label: &'static str,
    scenario: &'static str,
    clients: usize,
    fraction: f64,
}

const CEILING: &str = "ceiling (hello server)";
const CREATE: &str = "create ServiceAccount";
const GET: &str = "get ServiceAccount";
const CREATE_RBAC: &str = "create ServiceAccount (RBAC, token, HTTP)";
const GET_RBAC: &str = "get ServiceAccount (RBAC, token, HTTP)";
const CREATE_TLS: &str = "create ServiceAccount (TLS, RBAC, token)";
const GET_TLS: &str = "get ServiceAccount (TLS, RBAC, token)";

const TARGETS: [Target; 2] = [
    Target {
        label: "get at 64 clients",
        scenario: GET,
        clients: 64,
        fraction: 0.60,
    },
    Target {
        label: "durable create at 64 clients",
        scenario: CREATE,
        clients: 64,
        fraction: 0.20,
    },
];

pub fn bench(options: &Options) -> Result<()> {
    // A debug build of the load generator and the hello server would understate the ceiling,
    // so measure with an optimised xtask.
    if cfg!(debug_assertions) && std::env::var_os(RELEASE_MARKER).is_none() {
        // One workspace build makes both the optimised xtask and the server, so the build the
        // optimised run does again is a no-op and never replaces the running binary.
        prereq::ensure()?;
        run_step(cargo(["build", "--release", "--workspace"]))?;
        let mut command = Command::new(release_binary("xtask")?);
        command
            .arg("bench")
            .args(&options.raw)
            .env(RELEASE_MARKER, "1");
        step("re-running xtask optimised, so the load generator does not limit the figures");
        return run_step(command);
    }

    let strata_binary = if options.only_ceiling {
        None
    } else if let Some(binary) = &options.binary {
        if !binary.is_file() {
            return Err(format!("--strata-binary: {} is not a file", binary.display()).into());
        }
        Some(binary.clone())
    } else {
        prereq::ensure()?;
        // The whole workspace, as every other build does: building one package unifies
        // dependency features differently and would rebuild RocksDB.
        run_step(cargo(["build", "--release", "--workspace"]))?;
        Some(strata_binary()?)
    };

    let scratch = tempfile::Builder::new().prefix("strata-bench-").tempdir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let command = std::iter::once("cargo xtask bench".to_string())
        .chain(options.raw.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    let header = provenance(&command, options.binary.as_deref());
    let doc_path = workspace_root().join("docs/benchmarks.md");
    let mut all_verdicts = Vec::new();

    if options.parts.foundation {
        let (section, verdicts) = foundation(
            options,
            &runtime,
            scratch.path(),
            strata_binary.as_deref(),
            &header,
        )?;
        if let Some(section) = section.filter(|_| options.write) {
            let old = std::fs::read_to_string(&doc_path).unwrap_or_default();
            std::fs::write(&doc_path, replace_section(&old, SECTION, &section))?;
            eprintln!("\nwrote the {SECTION} section of {}", doc_path.display());
        }
        all_verdicts.extend(verdicts);
    }

    let Some(binary) = strata_binary.as_deref() else {
        return finish(options, &all_verdicts);
    };
    let mut lists_text = None;
    if options.parts.lists {
        let results = runtime.block_on(lists::run(binary, scratch.path(), &options.list_sizes))?;
        let setup = lists::setup_table(&results);
        let table = lists::table(&results);
        let verdicts = lists::verdicts(&results);
        println!("\n{setup}\n{table}");
        for (line, _) in &verdicts {
            println!("- {line}");
        }
        lists_text = Some(lists_subsection(&header, &setup, &table, &verdicts));
        all_verdicts.extend(verdicts);
    }
    let mut watch_text = None;
    if options.parts.watch {
        let results = runtime.block_on(watch::run(binary, scratch.path(), options.watch))?;
        let table = watch::table(&results);
        let problems = watch::problems(&results);
        let verdicts = watch::verdicts(&results);
        println!("\n{table}");
        for line in &problems {
            println!("- {line}");
        }
        for (line, _) in &verdicts {
            println!("- {line}");
        }
        watch_text = Some(watch_subsection(
            &header,
            options.watch,
            &table,
            &problems,
            &verdicts,
        ));
        all_verdicts.extend(verdicts);
    }
    if options.write && (lists_text.is_some() || watch_text.is_some()) {
        let old = std::fs::read_to_string(&doc_path).unwrap_or_default();
        let new = update_lists_and_watch(&old, lists_text.as_deref(), watch_text.as_deref());
        std::fs::write(&doc_path, new)?;
        eprintln!(
            "\nwrote the {LISTS_AND_WATCH} section of {}",
            doc_path.display()
        );
    }
    if options.parts.updates {
        let measure = Duration::from_secs(options.seconds);
        let results = runtime.block_on(updates::run(binary, scratch.path(), measure))?;
        let table = updates::table(&results);
        let problems = updates::problems(&results);
        println!("\n{table}");
        for line in &problems {
            println!("- {line}");
        }
        if options.write {
            let section = updates::section(&header, measure, &table, &problems);
            let old = std::fs::read_to_string(&doc_path).unwrap_or_default();
            std::fs::write(&doc_path, replace_section(&old, updates::SECTION, &section))?;
            eprintln!(
                "\nwrote the {} section of {}",
                updates::SECTION,
                doc_path.display()
            );
        }
    }
    if options.parts.formats {
        let results = runtime.block_on(formats::run(binary, scratch.path()))?;
        let table = formats::table(&results);
        println!("\n{table}");
        if options.write {
            let section = formats::section(&header, &table);
            let old = std::fs::read_to_string(&doc_path).unwrap_or_default();
            std::fs::write(&doc_path, replace_section(&old, formats::SECTION, &section))?;
            eprintln!(
                "\nwrote the {} section of {}",
                formats::SECTION,
                doc_path.display()
            );
        }
    }
    if options.parts.crd {
        let measure = Duration::from_secs(options.seconds);
        let results = runtime.block_on(crd::run(binary, scratch.path(), measure))?;
        println!("\n{}", crd::table(&results));
        for line in crd::problems(&results) {
            println!("- {line}");
        }
        let verdicts = crd::verdicts(&results);
        for (line, _) in &verdicts {
            println!("- {line}");
        }
        if options.write {
            let section = crd::section(&header, &results, measure);
            let old = std::fs::read_to_string(&doc_path).unwrap_or_default();
            std::fs::write(&doc_path, replace_section(&old, crd::SECTION, &section))?;
            eprintln!(
                "\nwrote the {} section of {}",
                crd::SECTION,
                doc_path.display()
            );
        }
        all_verdicts.extend(verdicts);
    }
    if options.parts.metrics {
        let measure = Duration::from_secs(options.seconds);
        let results = runtime.block_on(metrics::run(binary, scratch.path(), measure))?;
        println!("\n{}", metrics::table(&results));
        for line in metrics::problems(&results) {
            println!("- {line}");
        }
        let verdicts = metrics::verdicts(&results);
        for (line, _) in &verdicts {
            println!("- {line}");
        }
        if options.write {
            let section = metrics::section(&header, &results, measure);
            let old = std::fs::read_to_string(&doc_path).unwrap_or_default();
            std::fs::write(&doc_path, replace_section(&old, metrics::SECTION, &section))?;
            eprintln!(
                "\nwrote the {} section of {}",
                metrics::SECTION,
                doc_path.display()
            );
        }
        all_verdicts.extend(verdicts);
    }
    if options.parts.coldstart {
        let results = runtime.block_on(coldstart::run(binary, scratch.path()))?;
        println!("\n{}", coldstart::table(&results));
        let verdicts = coldstart::verdicts(&results);
        for (line, _) in &verdicts {
            println!("- {line}");
        }
        if options.write {
            let section = coldstart::section(&header, &results);
            let old = std::fs::read_to_string(&doc_path).unwrap_or_default();
            std::fs::write(
                &doc_path,
                replace_section(&old, coldstart::SECTION, &section),
            )?;
            eprintln!(
                "\nwrote the {} section of {}",
                coldstart::SECTION,
                doc_path.display()
            );
        }
        all_verdicts.extend(verdicts);
    }
    if options.parts.etcd {
        let measure = Duration::from_secs(options.seconds);
        let results =
            runtime.block_on(etcd::run(binary, scratch.path(), measure, options.watch))?;
        println!(
            "\n{}\n{}",
            etcd::table(&results),
            etcd::fan_out_tables(&results)
        );
        for line in etcd::problems(&results) {
            println!("- {line}");
        }
        let verdicts = etcd::verdicts(&results);
        for (line, _) in &verdicts {
            println!("- {line}");
        }
        if options.write {
            let section = etcd::section(&header, &results, measure, options.watch);
            let old = std::fs::read_to_string(&doc_path).unwrap_or_default();
            std::fs::write(&doc_path, replace_section(&old, etcd::SECTION, &section))?;
            eprintln!(
                "\nwrote the {} section of {}",
                etcd::SECTION,
                doc_path.display()
            );
        }
        all_verdicts.extend(verdicts);
    }
    finish(options, &all_verdicts)
}

fn finish(options: &Options, verdicts: &[(String, bool)]) -> Result<()> {
    if options.check && verdicts.iter().any(|(_, pass)| !pass) {
        return Err("a benchmark target was missed".into());
    }
    Ok(())
}

/// The foundation figures: create and get against the hello-server ceiling. Returns the
/// section to write (none for `--only-ceiling`) and the verdicts.
fn foundation(
    options: &Options,
    runtime: &tokio::runtime::Runtime,
    scratch: &Path,
    strata_binary: Option<&Path>,
    header: &str,
) -> Result<(Option<String>, Vec<Verdict>)> {
    let measure = Duration::from_secs(options.seconds);

    // The children live in this function, so they are killed before `scratch` is removed.
    let hello_addr = free_addr()?;
    let mut hello_cmd = Command::new(std::env::current_exe()?);
    hello_cmd.args(["hello-server", "--listen", &hello_addr.to_string()]);
    let mut hello = ChildGuard::spawn("hello-server", hello_cmd, &scratch.join("hello.log"))?;
    runtime.block_on(wait_ready(
        &mut hello,
        hello_addr,
        "/",
        Duration::from_secs(10),
    ))?;

    let mut strata = match strata_binary {
        None => None,
        Some(binary) => Some(runtime.block_on(start_strata(binary, &scratch.join("foundation")))?),
    };

    let mut rows = Vec::new();
    let mut next_client = 0;
    let mut measure_one = |scenario: &'static str,
                           addr: SocketAddr,
                           clients: usize,
                           workload: Workload,
                           expect: StatusCode,
                           access: load::Access|
     -> Row {
        step(&format!(
            "{scenario}, {clients} client(s): {WARMUP:?} warm-up + {measure:?}"
        ));
        let spec = Scenario {
            addr,
            clients,
            first_client: next_client,
            workload,
            expect,
            warmup: WARMUP,
            measure,
            access,
            http2_connections: 0,
        };
        next_client += clients;
        let outcome = runtime.block_on(load::run(&spec));
        eprintln!(
            "{:.0} requests/s, {} error(s)",
            outcome.rps(),
            outcome.error_count()
        );
        Row {
            scenario,
            clients,
            outcome,
        }
    };

    for clients in CONCURRENCY {
        let ceiling = Workload::Get { path: "/".into() };
        rows.push(measure_one(
            CEILING,
            hello_addr,
            clients,
            ceiling,
            StatusCode::OK,
            load::Access::default(),
        ));
        hello.ensure_running()?;
    }
    if let Some(strata) = strata.as_mut() {
        let addr = strata.addr;
        for clients in CONCURRENCY {
            let create = Workload::CreateServiceAccount;
            rows.push(measure_one(
                CREATE,
                addr,
                clients,
                create,
                StatusCode::CREATED,
                load::Access::default(),
            ));
            strata.ensure_running()?;
        }
        let (status, body) = runtime.block_on(load::request_once(
            addr,
            Method::POST,
            "/api/v1/namespaces/default/serviceaccounts",
            Some(load::service_account_body("bench-get")),
        ))?;
        if status != StatusCode::CREATED {
            return Err(format!(
                "creating ServiceAccount bench-get: expected 201, got {status}: {}",
                String::from_utf8_lossy(&body)
            )
            .into());
        }
        for clients in CONCURRENCY {
            let get = Workload::Get {
                path: "/api/v1/namespaces/default/serviceaccounts/bench-get".into(),
            };
            rows.push(measure_one(
                GET,
                addr,
                clients,
                get,
                StatusCode::OK,
                load::Access::default(),
            ));
            strata.ensure_running()?;
        }
    }
    drop(strata);
    // The same with credentials checked and RBAC deciding, over plain HTTP (the cost of
    // authentication and authorization alone) and over TLS (what a real client pays).
    if let (Some(binary), false) = (strata_binary, options.only_ceiling) {
        for (tls, create_name, get_name) in
            [(false, CREATE_RBAC, GET_RBAC), (true, CREATE_TLS, GET_TLS)]
        {
            let dir = scratch.join(if tls { "secure-tls" } else { "secure-http" });
            let (mut secure, access) = runtime.block_on(start_secure(binary, &dir, tls))?;
            let addr = secure.addr;
            for clients in CONCURRENCY {
                rows.push(measure_one(
                    create_name,
                    addr,
                    clients,
                    Workload::CreateServiceAccount,
                    StatusCode::CREATED,
                    access.clone(),
                ));
                secure.ensure_running()?;
            }
            let (status, body) = runtime.block_on(load::request_with(
                addr,
                &access,
                Method::POST,
                "/api/v1/namespaces/default/serviceaccounts",
                Some(load::service_account_body("bench-get")),
            ))?;
            if status != StatusCode::CREATED {
                return Err(format!(
                    "creating ServiceAccount bench-get as bench: {status}: {}",
                    String::from_utf8_lossy(&body)
                )
                .into());
            }
            for clients in CONCURRENCY {
                let get = Workload::Get {
                    path: "/api/v1/namespaces/default/serviceaccounts/bench-get".into(),
                };
                rows.push(measure_one(
                    get_name,
                    addr,
                    clients,
                    get,
                    StatusCode::OK,
                    access.clone(),
                ));
                secure.ensure_running()?;
            }
        }
    }
    drop(hello);

    let table = table(&rows);
    let verdicts = if options.only_ceiling {
        Vec::new()
    } else {
        let mut v = verdicts(&rows);
        v.push(authorization_verdict(&rows));
        v
    };
    println!("\n{table}");
    for (line, _) in &verdicts {
        println!("- {line}");
    }
    print_errors(&rows);
    let section = (!options.only_ceiling).then(|| section(header, &table, &verdicts, &rows));
    Ok((section, verdicts))
}

/// Starts `strata serve` with its security on: bearer tokens (user `bench`, bound to the
/// `edit` ClusterRole by the admin), RBAC, and TLS unless `tls` is false. Returns the server
/// and how the `bench` user reaches it.
async fn start_secure(binary: &Path, dir: &Path, tls: bool) -> Result<(Strata, load::Access)> {
    std::fs::create_dir_all(dir)?;
    let tokens = dir.join("tokens.csv");
    std::fs::write(&tokens, "bench-token,bench,bench-uid\n")?;
    let addr = free_addr()?;
    let mut cmd = Command::new(binary);
    cmd.arg("serve")
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--data-dir")
        .arg(dir)
        .arg("--token-auth-file")
        .arg(&tokens);
    if !tls {
        cmd.arg("--insecure-http");
    }
    let mut child = ChildGuard::spawn("strata", cmd, &dir.with_extension("log"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let (admin, bench) = loop {
        child.ensure_running()?;
        let token = std::fs::read_to_string(dir.join("pki/admin.token")).unwrap_or_default();
        let ca = std::fs::read(dir.join("pki/ca.crt")).unwrap_or_default();
        if !token.is_empty() && (!tls || !ca.is_empty()) {
            let access = |t: &str| {
                if tls {
                    load::Access::tls(&ca, t)
                } else {
                    Ok(load::Access::token(t))
                }
            };
            let admin = access(token.trim())?;
            if let Ok((StatusCode::OK, _)) =
                load::request_with(addr, &admin, Method::GET, "/readyz", None).await
            {
                break (admin, access("bench-token")?);
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("secure strata not ready; log:\n{}", child.log_tail()).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "bench-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bench"}],
    });
    let (status, body) = load::request_with(
        addr,
        &admin,
        Method::POST,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        Some(binding.to_string()),
    )
    .await?;
    if status != StatusCode::CREATED {
        return Err(format!(
            "binding bench to edit: {status}: {}",
            String::from_utf8_lossy(&body)
        )
        .into());
    }
    Ok((Strata { child, addr }, bench))
}

/// A running `strata serve`, killed when dropped.
struct Strata {
    child: ChildGuard,
    addr: SocketAddr,
}

impl Strata {
    fn pid(&self) -> u32 {
        self.child.child.id()
    }

    fn ensure_running(&mut self) -> Result<()> {
        self.child.ensure_running()
    }
}

/// Starts `strata serve` on a free loopback port with a new data directory `dir` (its log
/// goes next to it) and waits until it is ready.
async fn start_strata(binary: &Path, dir: &Path) -> Result<Strata> {
    start_strata_with(binary, dir, &[]).await
}

/// `strata serve` on `addr` over `dir` as every benchmark part runs it: plain HTTP without
/// credentials, so the figures are the API's, not TLS's or RBAC's.
fn serve_command(binary: &Path, addr: SocketAddr, dir: &Path) -> Command {
    let mut cmd = Command::new(binary);
    cmd.arg("serve")
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--data-dir")
        .arg(dir)
        .args([
            "--insecure-http",
            "--anonymous-auth=true",
            "--authorization-mode=AlwaysAllow",
        ]);
    cmd
}

/// [`start_strata`] with more flags.
async fn start_strata_with(binary: &Path, dir: &Path, extra: &[&str]) -> Result<Strata> {
    let addr = free_addr()?;
    let mut cmd = serve_command(binary, addr, dir);
    cmd.args(extra);
    let mut child = ChildGuard::spawn("strata", cmd, &dir.with_extension("log"))?;
    wait_ready(&mut child, addr, "/readyz", Duration::from_secs(60)).await?;
    Ok(Strata { child, addr })
}

/// Creates namespace `name`; objects in it can be created only afterwards.
async fn create_namespace(addr: SocketAddr, name: &str) -> Result<()> {
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": name },
    });
    let (status, answer) = load::request_once(
        addr,
        Method::POST,
        "/api/v1/namespaces",
        Some(body.to_string()),
    )
    .await?;
    if status == StatusCode::CREATED {
        Ok(())
    } else {
        Err(format!(
            "creating namespace {name}: expected 201, got {status}: {}",
            String::from_utf8_lossy(&answer)
        )
        .into())
    }
}

/// Creates `count` ServiceAccounts in `namespace` through the API, `body(i)` being the i-th,
/// over `clients` keep-alive connections; any answer but 201 fails.
pub(crate) async fn create_service_accounts(
    addr: SocketAddr,
    namespace: &'static str,
    count: usize,
    clients: usize,
    body: fn(usize) -> serde_json::Value,
) -> Result<()> {
    let path = format!("/api/v1/namespaces/{namespace}/serviceaccounts");
    let mut tasks = Vec::new();
    for client in 0..clients {
        let path = path.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = load::connect(addr).await?;
            for i in (client..count).step_by(clients) {
                let object = body(i);
                let payload = Some(bytes::Bytes::from(object.to_string()));
                let (status, answer) =
                    load::request_on(&mut conn, addr, Method::POST, &path, payload).await?;
                if status != StatusCode::CREATED {
                    return Err(format!(
                        "create {}: {status}: {}",
                        object["metadata"]["name"],
                        String::from_utf8_lossy(&answer)
                    )
                    .into());
                }
            }
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }
    for task in tasks {
        task.await
            .map_err(|e| format!("create task: {e}"))?
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `<target_directory>/release/strata`, wherever cargo puts targets (`CARGO_TARGET_DIR`,
/// config, or `./target`).
fn strata_binary() -> Result<PathBuf> {
    release_binary("strata")
}

/// `<target_directory>/release/<name>`, when it has been built.
pub(crate) fn release_binary(name: &str) -> Result<PathBuf> {
    let metadata = crate::cargo_metadata(&["--no-deps"])?;
    let target = metadata["target_directory"]
        .as_str()
        .ok_or("cargo metadata: no target_directory")?;
    let binary = Path::new(target).join("release").join(name);
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!("{} was not built", binary.display()).into())
    }
}

/// A loopback address nobody is listening on right now.
fn free_addr() -> Result<SocketAddr> {
    // The port is released before the child binds it; a collision in between is unlikely and
    // shows up as a failed readiness wait, not as wrong figures.
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// A child server that is killed when the guard goes away, on success and on error alike.
struct ChildGuard {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl ChildGuard {
    fn spawn(name: &'static str, mut command: Command, log: &Path) -> Result<ChildGuard> {
        let out = File::create(log)?;
        let err = out.try_clone()?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("could not start {name} ({}): {e}", crate::show(&command)))?;
        Ok(ChildGuard {
            name,
            child,
            log: log.to_path_buf(),
        })
    }

    /// Fails, quoting the end of the child's log, if it has exited.
    fn ensure_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => Err(format!(
                "{} exited ({status}); end of its log:\n{}",
                self.name,
                self.log_tail()
            )
            .into()),
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // Either may fail only because the child is already gone, which is what we want.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `GET path` until it answers 200, the child dies, or `limit` passes.
async fn wait_ready(
    child: &mut ChildGuard,
    addr: SocketAddr,
    path: &str,
    limit: Duration,
) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        child.ensure_running()?;
        let last = match load::request_once(addr, Method::GET, path, None).await {
            Ok((StatusCode::OK, _)) => return Ok(()),
            Ok((status, _)) => format!("GET {path} answered {status}"),
            Err(e) => format!("GET {path}: {e}"),
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "{} on {addr} not ready after {limit:?} ({last}); end of its log:\n{}",
                child.name,
                child.log_tail()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ceiling_rps(rows: &[Row], clients: usize) -> Option<f64> {
    rows.iter()
        .find(|r| r.scenario == CEILING && r.clients == clients)
        .map(|r| r.outcome.rps())
}

fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | clients | requests/s | p50 | p99 | errors | of ceiling |\n\
         |---|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in rows {
        let ratio = match ceiling_rps(rows, row.clients) {
            Some(ceiling) if ceiling > 0.0 => {
                format!("{:.0}%", 100.0 * row.outcome.rps() / ceiling)
            }
            _ => "–".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {} | {} | {} | {} |",
            row.scenario,
            row.clients,
            row.outcome.rps(),
            latency(row.outcome.percentile(50.0)),
            latency(row.outcome.percentile(99.0)),
            row.outcome.error_count(),
            ratio
        );
    }
    out
}

fn latency(d: Option<Duration>) -> String {
    match d {
        None => "–".into(),
        Some(d) if d < Duration::from_millis(1) => format!("{} µs", d.as_micros()),
        Some(d) => format!("{:.2} ms", d.as_secs_f64() * 1000.0),
    }
}

/// One line per target with its verdict; a target with errors fails whatever its throughput.
fn verdicts(rows: &[Row]) -> Vec<(String, bool)> {
    TARGETS
        .iter()
        .map(|t| {
            let row = rows
                .iter()
                .find(|r| r.scenario == t.scenario && r.clients == t.clients);
            let ceiling = ceiling_rps(rows, t.clients).unwrap_or(0.0);
            let wanted = format!("{} ≥ {:.0}% of ceiling", t.label, t.fraction * 100.0);
            match row {
                Some(row) if ceiling > 0.0 => {
                    let ratio = row.outcome.rps() / ceiling;
                    let errors = row.outcome.error_count();
                    let pass = ratio >= t.fraction && errors == 0;
                    let note = if errors > 0 {
                        format!(", {errors} errors")
                    } else {
                        String::new()
                    };
                    let verdict = if pass { "PASS" } else { "FAIL" };
                    (
                        format!("{wanted}: **{verdict}** ({:.0}%{note})", ratio * 100.0),
                        pass,
                    )
                }
                _ => (format!("{wanted}: **FAIL** (not measured)"), false),
            }
        })
        .collect()
}

/// The security target: authenticating and authorizing every request costs under 10% of get
/// throughput at the highest concurrency (plain HTTP both ways, so TLS is not counted).
fn authorization_verdict(rows: &[Row]) -> (String, bool) {
    let clients = CONCURRENCY[CONCURRENCY.len() - 1];
    let rps = |name: &str| {
        rows.iter()
            .find(|r| r.scenario == name && r.clients == clients)
            .map(|r| (r.outcome.rps(), r.outcome.error_count()))
    };
    let wanted = format!("{GET_RBAC} ≥ 90% of {GET}, {clients} clients");
    match (rps(GET), rps(GET_RBAC)) {
        (Some((plain, _)), Some((secure, errors))) if plain > 0.0 => {
            let ratio = secure / plain;
            let pass = ratio >= 0.9 && errors == 0;
            let verdict = if pass { "PASS" } else { "FAIL" };
            (
                format!("{wanted}: **{verdict}** ({:.0}%)", ratio * 100.0),
                pass,
            )
        }
        _ => (format!("{wanted}: **FAIL** (not measured)"), false),
    }
}

fn print_errors(rows: &[Row]) {
    for row in rows.iter().filter(|r| r.outcome.error_count() > 0) {
        eprintln!(
            "\nerrors in {} with {} client(s):",
            row.scenario, row.clients
        );
        for (kind, (count, sample)) in &row.outcome.errors {
            eprintln!("  {count} × {kind} {sample}");
        }
    }
}

fn section(header: &str, table: &str, verdicts: &[(String, bool)], rows: &[Row]) -> String {
    let mut out = format!("## {SECTION}\n\n{header}");
    out.push_str(
        "\nEach client holds one keep-alive HTTP/1.1 connection and sends its requests back to \
         back; 1 s of warm-up precedes the measured window. The ceiling is `cargo xtask \
         hello-server`, a bare hyper server answering 200 with a small JSON body. Server, \
         ceiling and load generator share the machine. Requests/s counts expected responses \
         only (201 for create, 200 otherwise); latencies are theirs.\n\n",
    );
    out.push_str(table);
    out.push_str("\nTargets:\n\n");
    for (line, _) in verdicts {
        let _ = writeln!(out, "- {line}");
    }
    let failing: Vec<&Row> = rows
        .iter()
        .filter(|r| r.outcome.error_count() > 0)
        .collect();
    if !failing.is_empty() {
        out.push_str("\nErrors:\n\n");
        for row in failing {
            for (kind, (count, sample)) in &row.outcome.errors {
                let _ = writeln!(
                    out,
                    "- {}, {} client(s): {count} × {kind} `{}`",
                    row.scenario,
                    row.clients,
                    sample.replace('`', "'")
                );
            }
        }
    }
    out
}

/// The lines every section starts with: how to reproduce it, and when and where it ran.
fn provenance(command: &str, binary: Option<&Path>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "- Command: `{command}`");
    let _ = writeln!(out, "- Date: {}", utc_now());
    if let Some(commit) = git_commit() {
        let _ = writeln!(out, "- Commit: {commit}");
    }
    if let Some(binary) = binary {
        let _ = writeln!(
            out,
            "- Server: `{}`, given on the command line, not built from that commit",
            binary.display()
        );
    }
    let _ = writeln!(out, "- Machine: {}", machine());
    out
}

fn lists_subsection(header: &str, setup: &str, table: &str, verdicts: &[(String, bool)]) -> String {
    let mut out = format!("### {LISTS}\n\n{header}");
    let _ = write!(
        out,
        "\nFor each size, a fresh server is filled by {clients} keep-alive clients with \
         ServiceAccounts in namespace `{NAMESPACE}` (a name and two labels each). After a short \
         pause one client lists the collection {runs} times in `limit={page}` pages, following \
         `metadata.continue`, and then {runs} times unchunked. A walk's time runs from its first \
         request to the last byte of its last body. The server's resident memory (VmRSS) is \
         sampled every 20 ms, and its peak also read from VmHWM after a reset; growth is the \
         peak over the value just before the first walk of that kind. The chunked walks go \
         first, so memory that the allocator keeps after an unchunked list cannot hide their \
         growth. The stored data is the items' JSON as the server sends it, summed. Other CPU \
         is the machine's busy time during all walks of a row less the server's and the \
         client's: much of it means a disturbed run.\n\n",
        clients = lists::CREATE_CLIENTS,
        runs = lists::RUNS,
        page = lists::PAGE,
    );
    out.push_str(setup);
    out.push('\n');
    out.push_str(table);
    out.push_str("\nTarget:\n\n");
    for (line, _) in verdicts {
        let _ = writeln!(out, "- {line}");
    }
    out
}

fn watch_subsection(
    header: &str,
    plan: watch::Plan,
    table: &str,
    problems: &[String],
    verdicts: &[(String, bool)],
) -> String {
    let mut out = format!("### {WATCH}\n\n{header}");
    let _ = write!(
        out,
        "\nEach run starts a fresh server. {watchers} watchers each hold their own HTTP/1.1 \
         connection to `GET /api/v1/namespaces/{NAMESPACE}/serviceaccounts?watch=1&\
         resourceVersion=<from a list>`; then {writers} writers create ServiceAccounts for \
         {seconds} s, paced to {rate} creates/s in all, or back to back (full speed); the paced run is \
         repeated with the watches multiplexed over HTTP/2 (h2c), {streams} streams to a \
         connection as client-go opens them. Each object carries its send time in an \
         annotation, read from one monotonic clock shared by writers and watchers in one \
         process; the writers run on a thread and runtime of their own, so a create is not held \
         up behind the watchers' reads in this process. Delivery latency is a watcher's receipt \
         of the event minus that time, so it includes the create itself (see create p99). \
         Delivered/s counts events over all watchers, from the first create to the last \
         delivery; lost is watchers × events − delivered, after up to {idle} s of draining. CPU \
         is user + system time from the first create to the end of draining: the server's, the \
         client's, and the rest of the machine's (other processes; much of it means a \
         disturbed run). Server and client share the machine's cores.\n\n",
        watchers = plan.watchers,
        writers = watch::WRITERS,
        seconds = plan.seconds,
        rate = plan.rate,
        streams = watch::H2_STREAMS,
        idle = watch::DRAIN_IDLE.as_secs(),
    );
    out.push_str(table);
    if !problems.is_empty() {
        out.push_str("\nProblems:\n\n");
        for line in problems {
            let _ = writeln!(out, "- {line}");
        }
    }
    out.push_str("\nTarget:\n\n");
    for (line, _) in verdicts {
        let _ = writeln!(out, "- {line}");
    }
    out
}

/// Rewrites the subsections of the "Lists and watch" section that were measured, keeping the
/// other one; creates the section, with both subsections in order, when it is missing.
fn update_lists_and_watch(doc: &str, lists: Option<&str>, watch: Option<&str>) -> String {
    let mut section = section_text(doc, 2, LISTS_AND_WATCH).unwrap_or_else(|| {
        format!(
            "## {LISTS_AND_WATCH}\n\nFull lists of many objects and watch fan-out. Each \
             subsection is rewritten by the part of `cargo xtask bench` that measures it \
             (`--only lists`, `--only watch`) and records its own command, date, commit and \
             machine.\n\n### {LISTS}\n\nNot measured yet.\n\n### {WATCH}\n\nNot measured yet.\n"
        )
    });
    if let Some(lists) = lists {
        section = replace_block(&section, 3, LISTS, lists);
    }
    if let Some(watch) = watch {
        section = replace_block(&section, 3, WATCH, watch);
    }
    replace_section(doc, LISTS_AND_WATCH, &section)
}

/// Replaces the `## heading` section of a markdown document (up to the next `## `), keeping
/// everything else; appends the section when the document has none.
fn replace_section(doc: &str, heading: &str, section: &str) -> String {
    if doc.trim().is_empty() {
        return format!(
            "# Benchmarks\n\nWhole-server load figures from `cargo xtask bench`; see the \
             command in each section to reproduce them.\n\n{}\n",
            section.trim_end()
        );
    }
    replace_block(doc, 2, heading, section)
}

/// Where the block under the heading `level` × `#` + `heading` starts and ends, in lines: it
/// ends before the next heading of the same or a higher level.
fn block_lines(lines: &[&str], level: usize, heading: &str) -> Option<(usize, usize)> {
    let title = format!("{} {heading}", "#".repeat(level));
    let start = lines.iter().position(|l| l.trim_end() == title)?;
    let end = lines[start + 1..]
        .iter()
        .position(|l| {
            let hashes = l.len() - l.trim_start_matches('#').len();
            (1..=level).contains(&hashes) && l[hashes..].starts_with(' ')
        })
        .map_or(lines.len(), |i| start + 1 + i);
    Some((start, end))
}

/// The text of a block (see [`block_lines`]), heading included.
fn section_text(doc: &str, level: usize, heading: &str) -> Option<String> {
    let lines: Vec<&str> = doc.lines().collect();
    let (start, end) = block_lines(&lines, level, heading)?;
    Some(lines[start..end].join("\n") + "\n")
}

/// Replaces a block (see [`block_lines`]) with `block`, keeping everything else; appends
/// `block` when the document has no such heading.
fn replace_block(doc: &str, level: usize, heading: &str, block: &str) -> String {
    let block = block.trim_end();
    let lines: Vec<&str> = doc.lines().collect();
    let Some((start, end)) = block_lines(&lines, level, heading) else {
        return format!("{}\n\n{block}\n", doc.trim_end());
    };
    let mut out = String::new();
    for line in &lines[..start] {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(block);
    out.push('\n');
    if end < lines.len() {
        out.push('\n');
        for line in &lines[end..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Bytes as MiB with one decimal.
/// The median of `times` (zero for none).
fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or_default()
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// A duration in seconds, or milliseconds below one second.
fn seconds(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.1} ms", d.as_secs_f64() * 1000.0)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

fn machine() -> String {
    let cpus = Command::new("nproc")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| n.to_string())
        })
        .unwrap_or_else(|| "?".into());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpus} CPUs (nproc), {model}")
}

fn git_commit() -> Option<String> {
    let root = workspace_root();
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(&root)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(&root)
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    Some(if dirty {
        format!("`{head}` with uncommitted changes")
    } else {
        format!("`{head}`")
    })
}

fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// `YYYY-MM-DD HH:MM UTC` for seconds since the Unix epoch.
fn format_utc(secs: u64) -> String {
    let at = i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    at.format(time::macros::format_description!(
        "[year]-[month]-[day] [hour]:[minute] UTC"
    ))
    .unwrap_or_else(|_| format!("{secs} seconds after the epoch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(format_utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(format_utc(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(format_utc(1_767_225_599), "2025-12-31 23:59 UTC");
        assert_eq!(format_utc(1_709_210_096), "2024-02-29 12:34 UTC");
    }

    #[test]
    fn section_is_replaced_and_the_rest_kept() {
        let doc = "# Benchmarks\n\nIntro.\n\n## Foundation\n\nold\n| a |\n\n## Watch\n\nkeep\n";
        assert_eq!(
            replace_section(doc, "Foundation", "## Foundation\n\nnew\n"),
            "# Benchmarks\n\nIntro.\n\n## Foundation\n\nnew\n\n## Watch\n\nkeep\n"
        );
        let last = "# Benchmarks\n\n## Other\n\nx\n\n## Foundation\n\nold\n### detail\n";
        assert_eq!(
            replace_section(last, "Foundation", "## Foundation\n\nnew\n"),
            "# Benchmarks\n\n## Other\n\nx\n\n## Foundation\n\nnew\n"
        );
    }

    #[test]
    fn section_is_appended_or_document_created() {
        assert_eq!(
            replace_section(
                "# Benchmarks\n\n## Watch\n\nw\n",
                "Foundation",
                "## Foundation\n\nnew"
            ),
            "# Benchmarks\n\n## Watch\n\nw\n\n## Foundation\n\nnew\n"
        );
        let fresh = replace_section("", "Foundation", "## Foundation\n\nnew\n");
        assert!(fresh.starts_with("# Benchmarks\n"));
        assert!(fresh.ends_with("\n\n## Foundation\n\nnew\n"));
    }

    #[test]
    fn options() {
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let o = Options::parse(&args("--seconds 2 --only-ceiling")).unwrap();
        assert_eq!(
            (o.seconds, o.only_ceiling, o.write, o.check),
            (2, true, true, false)
        );
        assert_eq!(
            o.parts,
            Parts {
                foundation: true,
                lists: false,
                watch: false,
                updates: false,
                formats: false,
                crd: false,
                metrics: false,
                coldstart: false,
                etcd: false
            }
        );
        let o = Options::parse(&args("--only formats")).unwrap();
        assert!(o.parts.formats && !o.parts.foundation && !o.parts.lists);
        assert!(Options::parse(&args("--seconds 0")).is_err());
        assert!(Options::parse(&args("--seconds")).is_err());
        assert!(Options::parse(&args("--fast")).is_err());
    }

    #[test]
    fn options_of_lists_and_watch() {
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let o = Options::parse(&[]).unwrap();
        assert_eq!(
            o.parts,
            Parts {
                foundation: true,
                lists: true,
                watch: true,
                updates: true,
                formats: true,
                crd: true,
                metrics: true,
                coldstart: true,
                etcd: false
            }
        );
        assert_eq!(o.list_sizes, [10_000, 100_000]);
        assert_eq!(
            o.watch,
            watch::Plan {
                watchers: 1000,
                rate: 500,
                seconds: 10
            }
        );

        let o = Options::parse(&args(
            "--only lists --only watch --list-sizes 500,2000 --watchers 100 --rate 50 \
             --watch-seconds 3 --no-write --strata-binary /tmp/strata",
        ))
        .unwrap();
        assert_eq!(
            o.parts,
            Parts {
                foundation: false,
                lists: true,
                watch: true,
                updates: false,
                formats: false,
                crd: false,
                metrics: false,
                coldstart: false,
                etcd: false
            }
        );
        assert_eq!(o.list_sizes, [500, 2000]);
        assert_eq!(
            o.watch,
            watch::Plan {
                watchers: 100,
                rate: 50,
                seconds: 3
            }
        );
        assert!(!o.write);
        assert_eq!(o.binary.as_deref(), Some(Path::new("/tmp/strata")));
        let o = Options::parse(&args("--only foundation,watch")).unwrap();
        assert!(o.parts.foundation && o.parts.watch && !o.parts.lists);
        let o = Options::parse(&args("--only updates --seconds 2")).unwrap();
        assert!(o.parts.updates && !o.parts.foundation && !o.parts.lists && !o.parts.watch);
        let o = Options::parse(&args("--only etcd --seconds 3 --watchers 10")).unwrap();
        assert!(o.parts.etcd && !o.parts.foundation && !o.parts.watch && !o.parts.formats);
        assert_eq!((o.seconds, o.watch.watchers), (3, 10));
        let o = Options::parse(&args("--only crd --seconds 4")).unwrap();
        assert!(o.parts.crd && !o.parts.foundation && !o.parts.etcd && !o.parts.updates);
        assert_eq!(o.seconds, 4);
        let o = Options::parse(&args("--only metrics --seconds 3 --no-write")).unwrap();
        assert!(o.parts.metrics && !o.parts.crd && !o.parts.foundation && !o.write);
        let o = Options::parse(&args("--only coldstart")).unwrap();
        assert!(o.parts.coldstart && !o.parts.metrics && !o.parts.lists);

        for bad in [
            "--only",
            "--only list",
            "--only lists,",
            "--list-sizes 10,0",
            "--list-sizes x",
            "--watchers 0",
            "--rate -5",
            "--only watch --only-ceiling",
            "--only updates --only-ceiling",
            "--only etcd --only-ceiling",
            "--only crd --only-ceiling",
            "--only metrics --only-ceiling",
            "--only coldstart --only-ceiling",
        ] {
            assert!(Options::parse(&args(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn subsections_are_replaced_within_their_section() {
        let doc = "# Benchmarks\n\n## Foundation\n\nf\n";
        let created = update_lists_and_watch(doc, None, Some("### Watch fan-out\n\nw1\n"));
        assert!(created.starts_with("# Benchmarks\n\n## Foundation\n\nf\n\n## Lists and watch\n"));
        let lists_at = created.find("### Lists\n\nNot measured yet.").unwrap();
        let watch_at = created.find("### Watch fan-out\n\nw1\n").unwrap();
        assert!(lists_at < watch_at);

        let later = format!("{created}\n## Later\n\nz\n");
        let updated = update_lists_and_watch(&later, Some("### Lists\n\nl2\n"), None);
        assert!(updated.contains("### Lists\n\nl2\n\n### Watch fan-out\n\nw1\n\n## Later\n\nz\n"));
        assert!(!updated.contains("Not measured yet"));
        assert_eq!(
            update_lists_and_watch(&updated, Some("### Lists\n\nl2\n"), None),
            updated
        );
    }

    #[test]
    fn blocks_end_at_a_heading_of_their_level_or_above() {
        let doc = "## A\n\n### B\n\nb\n#### B.1\n\nb1\n### C\n\nc\n## D\n";
        assert_eq!(
            replace_block(doc, 3, "B", "### B\n\nnew"),
            "## A\n\n### B\n\nnew\n\n### C\n\nc\n## D\n"
        );
        assert_eq!(section_text(doc, 3, "C").as_deref(), Some("### C\n\nc\n"));
        assert_eq!(section_text(doc, 2, "B"), None);
        // A `#hashtag` line is no heading.
        assert_eq!(
            section_text("## A\n#x\n## B\n", 2, "A").as_deref(),
            Some("## A\n#x\n")
        );
    }
}
