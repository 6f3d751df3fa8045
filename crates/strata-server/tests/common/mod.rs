//! Test support: starts the real `strata` binary on 127.0.0.1 with a temporary data directory
//! and talks to it over HTTP.
#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// A running server process. Killed (SIGKILL) on drop.
pub struct TestServer {
    child: Option<Child>,
    pub addr: String,
    pub data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    client: HttpClient,
}

/// The answer to one request.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn code(&self) -> u16 {
        self.status.as_u16()
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

fn spawn(data_dir: &Path, extra: &[&str]) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start strata");
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the listening line");
    let addr = line
        .trim()
        .strip_prefix("strata: listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line from strata: {line:?}"))
        .to_string();
    (child, addr)
}

impl TestServer {
    /// Starts a server on a fresh temporary data directory.
    pub fn start() -> TestServer {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> TestServer {
        let tmp = tempfile::tempdir().expect("temp dir");
        let data_dir = tmp.path().to_path_buf();
        let mut s = Self::start_in(&data_dir, extra);
        s._tmp = Some(tmp);
        s
    }

    /// Starts a server on an existing data directory (kept by the caller).
    pub fn start_in(data_dir: &Path, extra: &[&str]) -> TestServer {
        let (child, addr) = spawn(data_dir, extra);
        TestServer {
            child: Some(child),
            addr,
            data_dir: data_dir.to_path_buf(),
            _tmp: None,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Kills the process with SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM and waits for the process to exit; returns whether it exited cleanly.
    pub fn terminate(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        for _ in 0..100 {
            if let Ok(Some(status)) = c.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        false
    }

    /// Sends a request with optional body and headers.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut req = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).expect("method"))
            .uri(self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::copy_from_slice(body.unwrap_or(b""))))
            .expect("request");
        let resp = tokio::time::timeout(Duration::from_secs(30), self.client.request(req))
            .await
            .expect("request timed out")
            .expect("request failed");
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send("GET", path, None, &[]).await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Reply {
        let bytes = serde_json::to_vec(body).expect("encode");
        self.send(
            "POST",
            path,
            Some(&bytes),
            &[("content-type", "application/json")],
        )
        .await
    }

    pub async fn put_json(&self, path: &str, body: &Value) -> Reply {
        let bytes = serde_json::to_vec(body).expect("encode");
        self.send(
            "PUT",
            path,
            Some(&bytes),
            &[("content-type", "application/json")],
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.send("DELETE", path, None, &[]).await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Asserts that a reply is a Status with this code and reason.
pub fn assert_status(reply: &Reply, code: u16, reason: &str) {
    assert_eq!(
        reply.code(),
        code,
        "body: {}",
        String::from_utf8_lossy(&reply.body)
    );
    let v = reply.json();
    assert_eq!(v["kind"], "Status", "{v}");
    assert_eq!(v["apiVersion"], "v1", "{v}");
    assert_eq!(v["code"], code, "{v}");
    assert_eq!(v["reason"], reason, "{v}");
    assert_eq!(v["status"], "Failure", "{v}");
}

/// The outcome of a subprocess that ran to its end.
#[derive(Debug)]
pub struct Finished {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn success(&self) -> bool {
        self.status.success()
    }
}

/// Runs a command to its end with stdin closed and stdout/stderr captured in files under `dir`
/// (so a chatty child cannot block on a full pipe). Kills it and panics, showing what it printed,
/// if it runs longer than `timeout`.
pub fn run_with_timeout(cmd: &mut Command, dir: &Path, timeout: Duration) -> Finished {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let out_path = dir.join(format!("run-{n}.stdout"));
    let err_path = dir.join(format!("run-{n}.stderr"));
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"));
    let started = std::time::Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let Some(status) = status else {
        panic!("{cmd:?} ran for more than {timeout:?} and was killed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    };
    Finished {
        status,
        stdout,
        stderr,
    }
}
