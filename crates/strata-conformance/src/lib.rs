//! A black-box checker of the API machinery rules of `../shared/docs/spec.md` (URI layout,
//! ServiceAccount operations, media types, chunked lists, watch, resourceVersion semantics,
//! updates and patches, dry run, field validation, deletion, compression, errors,
//! authentication and authorization) against any Kubernetes-compatible server, over HTTP only.
//!
//! [`run`] creates a namespace of its own (`conformance-<random>`), runs every selected
//! [`framework::Check`] in the specification's order, deletes what it created (even when checks
//! fail) and returns a [`report::Report`]: printed as one table per section, written as JUnit
//! XML and a JSON summary. `cargo xtask conformance --server URL` is [`main_with_args`]; Strata's
//! own tests run [`run`] against a local server. Nothing here depends on Strata: the checker
//! works against kube-apiserver, k3s or any other implementation.

pub mod checks;
pub mod client;
pub mod framework;
pub mod kubeconfig;
pub mod options;
pub mod report;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

pub use client::{Client, Credentials, TlsSettings};
pub use framework::{Check, Section};
pub use options::{Options, Profile, USAGE};
pub use report::{Outcome, Report};

use client::Req;
use framework::{Ctx, Fail};

/// Runs the selected checks against the server of `options`; `Err` when the run could not start
/// (bad flags, unreachable server, the namespace could not be created).
pub async fn run(options: &Options) -> Result<Report, String> {
    let started = Instant::now();
    let (write, read) = options.clients()?;
    let selected = checks::select(&options.only)?;
    let run_id = random_id();
    let cx = Arc::new(Ctx::new(write, read, options.profile, run_id));

    // The run's namespace; nothing runs without it.
    let (key, value) = cx.run_label();
    let resp = cx
        .write
        .send(Req::post("/api/v1/namespaces").json(&json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": cx.ns, "labels": {key: value}},
        })))
        .await
        .map_err(|f| describe(&f))?;
    if !(200..300).contains(&resp.status) {
        return Err(format!(
            "could not create the namespace {}:\n{}",
            cx.ns,
            resp.exchange()
        ));
    }

    let mut results = Vec::new();
    for check in selected {
        let check_started = Instant::now();
        if options.verbose {
            eprintln!("conformance: {} {}", check.section.number, check.id);
        }
        let run = check.run;
        let task_cx = cx.clone();
        // A check runs in a task of its own: a panic or a hang fails that check alone.
        let task = tokio::spawn(async move { run(&task_cx).await });
        let abort = task.abort_handle();
        let outcome = match tokio::time::timeout(options.check_timeout, task).await {
            Ok(Ok(Ok(()))) => Outcome::Passed,
            Ok(Ok(Err(Fail::Skipped(reason)))) => Outcome::Skipped(reason),
            Ok(Ok(Err(Fail::Failed(failure)))) => Outcome::Failed(failure),
            Ok(Err(join)) => Outcome::Failed(framework::Failure::new(format!(
                "the check panicked: {join}"
            ))),
            Err(_) => {
                abort.abort();
                Outcome::Failed(framework::Failure::new(format!(
                    "the check did not finish within {:?}",
                    options.check_timeout
                )))
            }
        };
        results.push(report::CheckReport {
            section: check.section,
            id: check.id,
            description: check.description,
            outcome,
            duration: check_started.elapsed(),
        });
    }

    let cleanup = cleanup(&cx).await;
    Ok(Report {
        server: cx.write.base().to_string(),
        profile: options.profile,
        namespace: cx.ns.clone(),
        results,
        cleanup,
        duration: started.elapsed(),
    })
}

/// Removes the finalizers the checks added and deletes the namespaces the run created;
/// returns what could not be done.
async fn cleanup(cx: &Ctx) -> Vec<String> {
    let mut problems = Vec::new();
    let finalized: Vec<String> = cx
        .finalized
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    for path in finalized {
        let req = Req::patch(&path).body(
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": null}}).to_string(),
        );
        match cx.write.send(req).await {
            Ok(resp) if resp.status == 200 || resp.status == 404 => {}
            Ok(resp) => problems.push(format!(
                "could not remove the finalizers of {path}:\n{}",
                resp.exchange()
            )),
            Err(fail) => problems.push(describe(&fail)),
        }
    }
    let mut namespaces = cx
        .extra_namespaces
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    namespaces.push(cx.ns.clone());
    for ns in namespaces {
        match cx
            .write
            .send(Req::delete(format!("/api/v1/namespaces/{ns}")))
            .await
        {
            Ok(resp) if resp.status < 300 || resp.status == 404 || resp.status == 409 => {}
            Ok(resp) => problems.push(format!(
                "could not delete the namespace {ns}:\n{}",
                resp.exchange()
            )),
            Err(fail) => problems.push(describe(&fail)),
        }
    }
    problems
}

fn describe(fail: &Fail) -> String {
    match fail {
        Fail::Skipped(reason) => reason.clone(),
        Fail::Failed(f) => match &f.exchange {
            Some(exchange) => format!("{}\n{exchange}", f.message),
            None => f.message.clone(),
        },
    }
}

/// Eight lower-case letters and digits, the first a letter: the id goes into names and label
/// values, and in YAML bodies an id such as `34358066` or `1e5` would otherwise read as a number.
fn random_id() -> String {
    use rand::Rng;
    const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let first = LETTERS[rng.random_range(0..LETTERS.len())] as char;
    std::iter::once(first)
        .chain((1..8).map(|_| CHARS[rng.random_range(0..CHARS.len())] as char))
        .collect()
}

/// The command line (`cargo xtask conformance ARGS`): parses `args`, runs, prints the tables,
/// writes the report; the exit code is 0 when every check passed or was skipped, 1 when one
/// failed, 2 for bad arguments or a run that could not start.
pub fn main_with_args(args: &[String]) -> i32 {
    let options = match Options::parse(args) {
        Ok(Some(options)) => options,
        Ok(None) => {
            print!("{USAGE}");
            return 0;
        }
        Err(message) => {
            eprintln!("conformance: {message}\n\n{USAGE}");
            return 2;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("conformance: could not start the runtime: {e}");
            return 2;
        }
    };
    let report = match runtime.block_on(run(&options)) {
        Ok(report) => report,
        Err(message) => {
            eprintln!("conformance: {message}");
            return 2;
        }
    };
    print!("{}", report.tables());
    if let Some(path) = &options.report {
        match report.write_files(path) {
            Ok((xml, json)) => eprintln!(
                "conformance: wrote {} and {}",
                xml.display(),
                json.display()
            ),
            Err(e) => {
                eprintln!("conformance: could not write the report: {e}");
                return 2;
            }
        }
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    if report.failed() > 0 {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::random_id;

    #[test]
    fn run_ids_start_with_a_letter() {
        for _ in 0..1000 {
            let id = random_id();
            assert_eq!(id.len(), 8);
            assert!(id.starts_with(|c: char| c.is_ascii_lowercase()), "{id}");
            assert!(
                id.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
                "{id}"
            );
        }
    }
}
