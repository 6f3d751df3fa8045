//! Real kubectl (1.31 and 1.37) against a server with its defaults (TLS from its own CA, its
//! admin kubeconfig), using what every namespace holds without anyone creating it:
//! `describe sa default`, `create token default` (and the token is a credential), and the CA
//! of `kube-root-ca.crt`, with which a kubectl that trusts nothing else verifies the server.
//!
//! A missing kubectl binary skips its test with a loud notice (see
//! /work/shared/tools/install-clients.sh).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{run_with_timeout, Finished, TestServer};

/// How long one kubectl invocation may take before it counts as hung.
const TIMEOUT: Duration = Duration::from_secs(60);

/// One kubectl binary with a HOME, cache and working directory of its own.
struct Kubectl {
    bin: PathBuf,
    dir: tempfile::TempDir,
}

impl Kubectl {
    /// `kubectl-<version>` from /usr/local/bin or PATH; `None` (with a notice) when missing.
    fn find(version: &str) -> Option<Kubectl> {
        let name = format!("kubectl-{version}");
        let mut dirs = vec![PathBuf::from("/usr/local/bin")];
        if let Some(path) = std::env::var_os("PATH") {
            dirs.extend(std::env::split_paths(&path));
        }
        let Some(bin) = dirs
            .into_iter()
            .map(|d| d.join(&name))
            .find(|p| p.is_file())
        else {
            eprintln!(
                "\n!!!!!!!! SKIPPED: {name} is not installed (run /work/shared/tools/install-clients.sh); \
                 this kubectl test asserts nothing !!!!!!!!\n"
            );
            return None;
        };
        Some(Kubectl {
            bin,
            dir: tempfile::tempdir().expect("temp dir"),
        })
    }

    /// Runs kubectl with `kubeconfig` and these arguments.
    fn run(&self, kubeconfig: &Path, args: &[&str]) -> Finished {
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).expect("home dir");
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home);
        run_with_timeout(&mut cmd, self.dir.path(), TIMEOUT)
    }

    /// Runs kubectl, asserts exit 0 and returns stdout.
    fn ok(&self, kubeconfig: &Path, args: &[&str]) -> String {
        let r = self.run(kubeconfig, args);
        assert!(
            r.success(),
            "kubectl {args:?} failed ({})\nstdout:\n{}\nstderr:\n{}",
            r.status,
            r.stdout,
            r.stderr
        );
        r.stdout
    }
}

/// Lines `Key:   value` of `kubectl describe` as (key, value).
fn described(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no {key:?} in:\n{text}"))
}

fn defaults_through_kubectl(version: &str) {
    let Some(k) = Kubectl::find(version) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let s = TestServer::start_tls_in(dir.path(), &[]);
    let admin = dir.path().join("admin.kubeconfig");

    // The bootstrap namespaces have theirs from the start.
    let out = k.ok(&admin, &["describe", "sa", "default", "-n", "default"]);
    assert_eq!(described(&out, "Name"), "default", "{out}");
    assert_eq!(described(&out, "Namespace"), "default", "{out}");

    // A new namespace gets one.
    k.ok(&admin, &["create", "namespace", "kubectl-team"]);
    let deadline = Instant::now() + Duration::from_secs(15);
    let out = loop {
        let r = k.run(&admin, &["describe", "sa", "default", "-n", "kubectl-team"]);
        if r.success() {
            break r.stdout;
        }
        assert!(
            Instant::now() < deadline,
            "no default ServiceAccount: {}",
            r.stderr
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(described(&out, "Namespace"), "kubectl-team", "{out}");

    // Its token authenticates as the ServiceAccount.
    let token = k.ok(
        &admin,
        &["create", "token", "default", "-n", "kubectl-team"],
    );
    let token = token.trim();
    assert_eq!(token.split('.').count(), 3, "{token}");
    let who = k.ok(
        &admin,
        &[
            "--token",
            token,
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    );
    assert_eq!(who, "system:serviceaccount:kubectl-team:default");

    // The published CA is the one that signs the serving certificate ...
    let deadline = Instant::now() + Duration::from_secs(15);
    let pem = loop {
        let r = k.run(
            &admin,
            &[
                "get",
                "cm",
                "kube-root-ca.crt",
                "-n",
                "kubectl-team",
                "-o",
                "jsonpath={.data.ca\\.crt}",
            ],
        );
        if r.success() {
            break r.stdout;
        }
        assert!(
            Instant::now() < deadline,
            "no kube-root-ca.crt: {}",
            r.stderr
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let ca = std::fs::read_to_string(dir.path().join("pki/ca.crt")).expect("pki/ca.crt");
    assert_eq!(pem.trim(), ca.trim());

    // ... and a kubectl that knows nothing but that file and a token verifies the server with it
    // (and without it, refuses the server's certificate).
    let ca_file = dir.path().join("published-ca.crt");
    std::fs::write(&ca_file, &pem).expect("write the CA");
    let bare = dir.path().join("bare.kubeconfig");
    std::fs::write(
        &bare,
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: strata
  cluster:
    server: https://{}
contexts:
- name: sa
  context:
    cluster: strata
    namespace: kubectl-team
    user: sa
current-context: sa
users:
- name: sa
  user:
    token: {token}
",
            s.addr
        ),
    )
    .expect("write the kubeconfig");
    let ca_flag = format!("--certificate-authority={}", ca_file.display());
    let whoami = [
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ];
    let mut verified = vec![ca_flag.as_str()];
    verified.extend(whoami);
    let out = k.ok(&bare, &verified);
    assert_eq!(out, "system:serviceaccount:kubectl-team:default");
    let r = k.run(&bare, &whoami);
    assert!(!r.success(), "verified without a CA: {}", r.stdout);
    assert!(
        r.stderr.contains("certificate signed by unknown authority") || r.stderr.contains("x509"),
        "{}",
        r.stderr
    );
}

#[test]
fn kubectl_1_31_default_service_account_token_and_root_ca() {
    defaults_through_kubectl("1.31");
}

#[test]
fn kubectl_1_37_default_service_account_token_and_root_ca() {
    defaults_through_kubectl("1.37");
}
