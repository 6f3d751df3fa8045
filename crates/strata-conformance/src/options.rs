//! The checker's options and command line: where the server is, how to authenticate, which
//! sections to run, which profile of expected behaviour, and where to write the report.

use std::path::PathBuf;
use std::time::Duration;

use crate::client::{Client, Credentials, TlsSettings};
use crate::kubeconfig;

/// Which behaviour a check expects where the specification and Kubernetes 1.31 differ
/// (Strata's `docs/compatibility.md` lists those places).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Profile {
    /// What `spec.md` states (Strata's behaviour).
    #[default]
    Spec,
    /// What Kubernetes 1.31's kube-apiserver does.
    Kubernetes,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Spec => "spec",
            Profile::Kubernetes => "kubernetes",
        }
    }
}

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct Options {
    /// The server's URL; writes go here.
    pub server: String,
    /// Another replica of the same cluster for reads and watches (`--read-server`).
    pub read_server: Option<String>,
    pub credentials: Credentials,
    pub tls: TlsSettings,
    /// Sections to run (numbers like `4.5` or names like `watch`); all when empty.
    pub only: Vec<String>,
    pub profile: Profile,
    /// `--report FILE`: JUnit XML and a JSON summary.
    pub report: Option<PathBuf>,
    /// Print each check's name to stderr as it starts.
    pub verbose: bool,
    /// How long one check may take.
    pub check_timeout: Duration,
}

/// The command line's help.
pub const USAGE: &str = "\
usage: cargo xtask conformance --server URL [OPTIONS]
       cargo xtask conformance --kubeconfig FILE [OPTIONS]

Runs black-box checks of the rules of the specification (../shared/docs/spec.md) against a
Kubernetes-compatible API server. It creates a namespace of its own (conformance-<random>),
touches nothing else and deletes it at the end. Exit status: 0 when no check failed, 1 when one
did, 2 when the run could not start.

options:
  --server URL                  the API server (https://host:port or http://host:port); overrides
                                the kubeconfig's
  --read-server URL             send reads and watches to this replica of the same cluster
                                (writes go to --server)
  --kubeconfig FILE             server, CA, token or client certificate from FILE's current context
  --context NAME                use this kubeconfig context instead of the current one
  --token TOKEN                 bearer token (overrides the kubeconfig's credentials)
  --certificate-authority FILE  PEM CA bundle to verify the server with
  --insecure-skip-tls-verify    do not verify the server's certificate
  --only SECTION...             run only these sections: numbers (4.5) or names (watch), several
                                after one --only or comma-separated; --list shows them
  --profile spec|kubernetes     where the specification and Kubernetes 1.31 differ, expect the
                                specification's behaviour (spec, the default) or Kubernetes'
  --report FILE                 write JUnit XML (FILE.xml, or FILE itself when it ends in .xml)
                                and a JSON summary (FILE.json)
  --check-timeout SECONDS       fail a check that takes longer (default 120)
  --verbose                     name each check on stderr as it starts
  --list                        list the sections and checks, and exit
  --help                        this text
";

impl Options {
    /// Options for `server` with no credentials, every section and the spec profile.
    pub fn new(server: &str) -> Options {
        Options {
            server: server.to_string(),
            read_server: None,
            credentials: Credentials::None,
            tls: TlsSettings::default(),
            only: Vec::new(),
            profile: Profile::Spec,
            report: None,
            verbose: false,
            check_timeout: Duration::from_secs(120),
        }
    }

    /// Parses the command line; `Ok(None)` for `--help` and `--list` (already printed).
    pub fn parse(args: &[String]) -> Result<Option<Options>, String> {
        let mut server = None;
        let mut read_server = None;
        let mut kubeconfig_path: Option<PathBuf> = None;
        let mut context = None;
        let mut token = None;
        let mut ca_file: Option<PathBuf> = None;
        let mut insecure = false;
        let mut only = Vec::new();
        let mut profile = Profile::Spec;
        let mut report = None;
        let mut verbose = false;
        let mut check_timeout = Duration::from_secs(120);

        let mut i = 0;
        while i < args.len() {
            let (flag, inline) = match args[i].split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (args[i].clone(), None),
            };
            let mut value = |name: &str| -> Result<String, String> {
                if let Some(v) = &inline {
                    return Ok(v.clone());
                }
                i += 1;
                args.get(i)
                    .cloned()
                    .filter(|v| !v.starts_with("--"))
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match flag.as_str() {
                "--server" => server = Some(value("--server")?),
                "--read-server" => read_server = Some(value("--read-server")?),
                "--kubeconfig" => kubeconfig_path = Some(PathBuf::from(value("--kubeconfig")?)),
                "--context" => context = Some(value("--context")?),
                "--token" => token = Some(value("--token")?),
                "--certificate-authority" => {
                    ca_file = Some(PathBuf::from(value("--certificate-authority")?))
                }
                "--insecure-skip-tls-verify" => {
                    insecure = match inline.as_deref() {
                        None | Some("true") => true,
                        Some("false") => false,
                        Some(other) => {
                            return Err(format!(
                                "--insecure-skip-tls-verify={other}: true or false"
                            ))
                        }
                    }
                }
                "--only" => {
                    let first = value("--only")?;
                    only.extend(split_list(&first));
                    if inline.is_none() {
                        while let Some(next) = args.get(i + 1).filter(|a| !a.starts_with("--")) {
                            only.extend(split_list(next));
                            i += 1;
                        }
                    }
                }
                "--profile" => {
                    profile = match value("--profile")?.as_str() {
                        "spec" => Profile::Spec,
                        "kubernetes" | "k8s" => Profile::Kubernetes,
                        other => {
                            return Err(format!("--profile {other}: expected spec or kubernetes"))
                        }
                    }
                }
                "--report" => report = Some(PathBuf::from(value("--report")?)),
                "--check-timeout" => {
                    let text = value("--check-timeout")?;
                    let secs: u64 = text
                        .parse()
                        .map_err(|_| format!("--check-timeout {text}: a number of seconds"))?;
                    check_timeout = Duration::from_secs(secs.max(1));
                }
                "--verbose" | "-v" => verbose = true,
                "--list" => {
                    print!("{}", crate::checks::listing());
                    return Ok(None);
                }
                "--help" | "-h" | "help" => return Ok(None),
                other => return Err(format!("unknown argument {other}")),
            }
            i += 1;
        }

        crate::checks::select(&only)?;
        let mut options = Options::new("");
        if let Some(path) = &kubeconfig_path {
            let kc = kubeconfig::load(path, context.as_deref())?;
            options.server = kc.server;
            options.tls.ca_pem = kc.ca_pem;
            options.tls.insecure = kc.insecure;
            options.tls.client_cert_pem = kc.client_cert_pem;
            if let Some(t) = kc.token {
                options.credentials = Credentials::Bearer(t);
            }
        } else if context.is_some() {
            return Err("--context needs --kubeconfig".to_string());
        }
        if let Some(server) = server {
            options.server = server;
        }
        if options.server.is_empty() {
            return Err("give --server URL or --kubeconfig FILE".to_string());
        }
        if let Some(t) = token {
            options.credentials = Credentials::Bearer(t);
            options.tls.client_cert_pem = None;
        }
        if let Some(file) = ca_file {
            let pem = std::fs::read(&file)
                .map_err(|e| format!("could not read {}: {e}", file.display()))?;
            options.tls.ca_pem = Some(pem);
        }
        if insecure {
            options.tls.insecure = true;
        }
        options.read_server = read_server;
        options.only = only;
        options.profile = profile;
        options.report = report;
        options.verbose = verbose;
        options.check_timeout = check_timeout;
        Ok(Some(options))
    }

    /// The write client and the read client (the same server unless `read_server` is set).
    pub fn clients(&self) -> Result<(Client, Client), String> {
        let write = Client::new(&self.server, &self.tls, self.credentials.clone())?;
        let read = match &self.read_server {
            Some(url) => Client::new(url, &self.tls, self.credentials.clone())?,
            None => write.clone(),
        };
        Ok((write, read))
    }
}

fn split_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn flags_parse() {
        let o = Options::parse(&args(
            "--server http://127.0.0.1:1 --token t --only 4.1 uri --only=objects,4.2 --profile kubernetes --report out",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(o.server, "http://127.0.0.1:1");
        assert_eq!(o.credentials, Credentials::Bearer("t".into()));
        assert_eq!(o.only, ["4.1", "uri", "objects", "4.2"]);
        assert_eq!(o.profile, Profile::Kubernetes);
        assert_eq!(o.report, Some(PathBuf::from("out")));
    }

    #[test]
    fn mistakes_are_named() {
        let e = Options::parse(&args("--server http://x --only nosuch")).unwrap_err();
        assert!(e.contains("nosuch"), "{e}");
        let e = Options::parse(&args("--token t")).unwrap_err();
        assert!(e.contains("--server"), "{e}");
        let e = Options::parse(&args("--server http://x --profile both")).unwrap_err();
        assert!(e.contains("spec or kubernetes"), "{e}");
        let e = Options::parse(&args("--server")).unwrap_err();
        assert!(e.contains("needs a value"), "{e}");
    }
}
