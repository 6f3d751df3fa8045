//! The HTTP client the checks speak through: hyper over plain TCP or rustls, a bearer token or a
//! client certificate, requests built by hand and answers kept whole (status, headers, body) so
//! that a failed check can show what it sent and what came back.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{HeaderMap, Method, Request};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use serde_json::Value;

use crate::framework::{Fail, Failure};

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// How requests prove who sends them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Credentials {
    /// No credentials (anonymous, or a client certificate given in [`TlsSettings`]).
    #[default]
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
}

/// TLS settings for `https://` servers.
#[derive(Clone, Debug, Default)]
pub struct TlsSettings {
    /// PEM certificates of the CA(s) to trust; the platform's roots when empty.
    pub ca_pem: Option<Vec<u8>>,
    /// Accept any server certificate (`--insecure-skip-tls-verify`).
    pub insecure: bool,
    /// A client certificate chain and its key, both PEM.
    pub client_cert_pem: Option<(Vec<u8>, Vec<u8>)>,
}

/// A server to send requests to, with credentials.
#[derive(Clone)]
pub struct Client {
    base: String,
    tls: TlsSettings,
    credentials: Credentials,
    http: HyperClient<Connector, Full<Bytes>>,
    timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("base", &self.base).finish()
    }
}

/// One request, built by a check.
#[derive(Clone, Debug)]
pub struct Req {
    pub method: Method,
    /// Path and query, starting with `/`.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Req {
    pub fn new(method: Method, path: impl Into<String>) -> Req {
        Req {
            method,
            path: path.into(),
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }
    pub fn get(path: impl Into<String>) -> Req {
        Req::new(Method::GET, path)
    }
    pub fn post(path: impl Into<String>) -> Req {
        Req::new(Method::POST, path)
    }
    pub fn put(path: impl Into<String>) -> Req {
        Req::new(Method::PUT, path)
    }
    pub fn patch(path: impl Into<String>) -> Req {
        Req::new(Method::PATCH, path)
    }
    pub fn delete(path: impl Into<String>) -> Req {
        Req::new(Method::DELETE, path)
    }
    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
    /// A JSON body (`Content-Type: application/json`).
    pub fn json(self, body: &Value) -> Req {
        self.body("application/json", body.to_string())
    }
    /// A body of the given media type.
    pub fn body(mut self, content_type: &str, body: impl Into<Bytes>) -> Req {
        self.headers
            .push(("Content-Type".to_string(), content_type.to_string()));
        self.body = body.into();
        self
    }
    /// The request as a failure report shows it.
    pub fn summary(&self) -> String {
        let mut text = format!("{} {}", self.method, self.path);
        for (name, value) in &self.headers {
            text.push_str(&format!("\n  {name}: {value}"));
        }
        if !self.body.is_empty() {
            text.push_str(&format!("\n  body: {}", trimmed(&self.body, 400)));
        }
        text
    }
}

/// A complete answer.
#[derive(Clone, Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// What was sent, for failure reports.
    pub request: String,
}

impl Resp {
    /// A header's value, `""` when absent.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
    /// Every value of a header.
    pub fn header_all(&self, name: &str) -> Vec<String> {
        self.headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect()
    }
    /// The body as JSON, or a failure showing the exchange.
    pub fn json(&self) -> Result<Value, Fail> {
        serde_json::from_slice(&self.body)
            .map_err(|e| Fail::with(self, format!("the response body is not JSON: {e}")))
    }
    /// The exchange as a failure report shows it.
    pub fn exchange(&self) -> String {
        let mut text = format!("request: {}\nresponse: {}", self.request, self.status);
        for name in [
            "content-type",
            "content-encoding",
            "warning",
            "retry-after",
            "transfer-encoding",
        ] {
            for value in self.header_all(name) {
                text.push_str(&format!("\n  {name}: {value}"));
            }
        }
        if !self.body.is_empty() {
            text.push_str(&format!("\n  body: {}", trimmed(&self.body, 600)));
        }
        text
    }
    /// Fails unless the status is `code`.
    pub fn expect(&self, code: u16) -> Result<&Resp, Fail> {
        self.expect_one_of(&[code])
    }
    /// Fails unless the status is one of `codes`.
    pub fn expect_one_of(&self, codes: &[u16]) -> Result<&Resp, Fail> {
        if codes.contains(&self.status) {
            return Ok(self);
        }
        let wanted: Vec<String> = codes.iter().map(u16::to_string).collect();
        Err(Fail::with(
            self,
            format!(
                "expected HTTP {}, got {}{}",
                wanted.join(" or "),
                self.status,
                status_words(&self.body)
            ),
        ))
    }
    /// The JSON body of an answer with status `code`.
    pub fn ok_json(&self, code: u16) -> Result<Value, Fail> {
        self.expect(code)?.json()
    }
}

/// ` (Reason: message)` when the body is a Status, for the first line of a failure.
fn status_words(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) if v["kind"] == "Status" => format!(
            " ({}: {})",
            v["reason"].as_str().unwrap_or(""),
            v["message"].as_str().unwrap_or("")
        ),
        _ => String::new(),
    }
}

/// Text of a body cut to about `max` characters (binary bytes escaped).
pub fn trimmed(body: &[u8], max: usize) -> String {
    let text: String = match std::str::from_utf8(body) {
        Ok(s) => s.split_whitespace().collect::<Vec<_>>().join(" "),
        Err(_) => body
            .iter()
            .map(|b| std::ascii::escape_default(*b).to_string())
            .collect(),
    };
    if text.chars().count() <= max {
        text
    } else {
        let cut: String = text.chars().take(max).collect();
        format!("{cut}… ({} bytes in all)", body.len())
    }
}

impl Client {
    /// A client of `base` (`http://` or `https://`, with an optional path prefix).
    pub fn new(base: &str, tls: &TlsSettings, credentials: Credentials) -> Result<Client, String> {
        let base = base.trim_end_matches('/').to_string();
        if !base.starts_with("http://") && !base.starts_with("https://") {
            return Err(format!(
                "{base}: the server URL must start with http:// or https://"
            ));
        }
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls_config(tls)?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let http = HyperClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(20))
            .build(connector);
        Ok(Client {
            base,
            tls: tls.clone(),
            credentials,
            http,
            timeout: Duration::from_secs(30),
        })
    }

    /// The same server as another user: `credentials` alone (no client certificate).
    pub fn as_user(&self, credentials: Credentials) -> Result<Client, String> {
        let tls = TlsSettings {
            client_cert_pem: None,
            ..self.tls.clone()
        };
        Client::new(&self.base, &tls, credentials)
    }

    /// The server's URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn build(&self, req: &Req) -> Result<Request<Full<Bytes>>, Fail> {
        let mut builder = Request::builder()
            .method(req.method.clone())
            .uri(format!("{}{}", self.base, req.path));
        if let Credentials::Bearer(token) = &self.credentials {
            if !req
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("authorization"))
            {
                builder = builder.header("Authorization", format!("Bearer {token}"));
            }
        }
        if !req
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("accept"))
        {
            builder = builder.header("Accept", "application/json");
        }
        // A header given with an empty value is left out (and so is the default it replaces).
        for (name, value) in req.headers.iter().filter(|(_, v)| !v.is_empty()) {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder
            .body(Full::new(req.body.clone()))
            .map_err(|e| Fail::Failed(Failure::new(format!("bad request {}: {e}", req.summary()))))
    }

    async fn start(&self, req: &Req) -> Result<hyper::Response<Incoming>, Fail> {
        let request = self.build(req)?;
        match tokio::time::timeout(self.timeout, self.http.request(request)).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => Err(Fail::Failed(Failure {
                message: format!("the request failed: {}", error_chain(&e)),
                exchange: Some(format!("request: {}", req.summary())),
            })),
            Err(_) => Err(Fail::Failed(Failure {
                message: format!("no answer within {:?}", self.timeout),
                exchange: Some(format!("request: {}", req.summary())),
            })),
        }
    }

    /// Sends a request and reads the whole answer.
    pub async fn send(&self, req: Req) -> Result<Resp, Fail> {
        let resp = self.start(&req).await?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = match tokio::time::timeout(self.timeout, resp.into_body().collect()).await {
            Ok(Ok(body)) => body.to_bytes(),
            Ok(Err(e)) => {
                return Err(Fail::Failed(Failure {
                    message: format!("reading the response body failed: {}", error_chain(&e)),
                    exchange: Some(format!("request: {}\nresponse: {status}", req.summary())),
                }))
            }
            Err(_) => {
                return Err(Fail::Failed(Failure {
                    message: format!("the response body did not end within {:?}", self.timeout),
                    exchange: Some(format!("request: {}\nresponse: {status}", req.summary())),
                }))
            }
        };
        Ok(Resp {
            status,
            headers,
            body,
            request: req.summary(),
        })
    }

    /// Opens a watch. A status other than 200 is read whole into [`Watch::refused`].
    pub async fn watch(&self, req: Req) -> Result<Watch, Fail> {
        let resp = self.start(&req).await?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        if status != 200 {
            let body = tokio::time::timeout(self.timeout, resp.into_body().collect())
                .await
                .ok()
                .and_then(Result::ok)
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Ok(Watch {
                status,
                headers: headers.clone(),
                body: None,
                buf: Vec::new(),
                request: req.summary(),
                seen: Vec::new(),
                refused: Some(Resp {
                    status,
                    headers,
                    body,
                    request: req.summary(),
                }),
            });
        }
        Ok(Watch {
            status,
            headers,
            body: Some(resp.into_body()),
            buf: Vec::new(),
            request: req.summary(),
            seen: Vec::new(),
            refused: None,
        })
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// What the next read of a watch gave.
#[derive(Debug)]
pub enum WatchNext {
    Event(Value),
    /// Nothing arrived in the time allowed.
    Quiet,
    /// The server ended the stream.
    End,
}

/// An open watch stream of JSON events.
pub struct Watch {
    pub status: u16,
    pub headers: HeaderMap,
    body: Option<Incoming>,
    buf: Vec<u8>,
    request: String,
    /// The events read so far (for failure reports).
    pub seen: Vec<Value>,
    /// The whole answer when the server refused the watch (status other than 200).
    pub refused: Option<Resp>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("status", &self.status)
            .finish()
    }
}

impl Watch {
    /// A header's value, `""` when absent.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The watch and the events read so far, for a failure report.
    pub fn exchange(&self) -> String {
        if let Some(resp) = &self.refused {
            return resp.exchange();
        }
        let mut text = format!(
            "request: {}\nresponse: {}\n  content-type: {}",
            self.request,
            self.status,
            self.header("content-type")
        );
        let shown = self.seen.len().saturating_sub(6);
        if shown > 0 {
            text.push_str(&format!("\n  ({shown} earlier events)"));
        }
        for event in &self.seen[shown..] {
            text.push_str(&format!(
                "\n  event: {}",
                trimmed(event.to_string().as_bytes(), 300)
            ));
        }
        text
    }

    /// A failure naming this watch.
    pub fn fail(&self, message: impl Into<String>) -> Fail {
        Fail::Failed(Failure {
            message: message.into(),
            exchange: Some(self.exchange()),
        })
    }

    /// Fails unless the server accepted the watch.
    pub fn expect_open(&self) -> Result<(), Fail> {
        match &self.refused {
            Some(resp) => Err(resp
                .expect(200)
                .err()
                .unwrap_or_else(|| self.fail("refused"))),
            None => Ok(()),
        }
    }

    /// The next event, waiting at most `wait`.
    pub async fn next(&mut self, wait: Duration) -> Result<WatchNext, Fail> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(event) = self.parse_one()? {
                self.seen.push(event.clone());
                return Ok(WatchNext::Event(event));
            }
            let Some(body) = self.body.as_mut() else {
                return Ok(WatchNext::End);
            };
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => return Ok(WatchNext::Quiet),
                Ok(None) => {
                    self.body = None;
                    if self.buf.iter().all(u8::is_ascii_whitespace) {
                        return Ok(WatchNext::End);
                    }
                    return Err(self.fail(format!(
                        "the stream ended inside an event: {}",
                        trimmed(&self.buf, 300)
                    )));
                }
                Ok(Some(Err(e))) => {
                    self.body = None;
                    return Err(
                        self.fail(format!("reading the stream failed: {}", error_chain(&e)))
                    );
                }
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next event, failing if none arrives within `wait` or the stream ends.
    pub async fn event(&mut self, wait: Duration) -> Result<Value, Fail> {
        match self.next(wait).await? {
            WatchNext::Event(e) => Ok(e),
            WatchNext::Quiet => Err(self.fail(format!("no watch event within {wait:?}"))),
            WatchNext::End => Err(self.fail("the server ended the watch")),
        }
    }

    /// The next event that is not a BOOKMARK.
    pub async fn change(&mut self, wait: Duration) -> Result<Value, Fail> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let event = self.event(left).await?;
            if event["type"] != "BOOKMARK" {
                return Ok(event);
            }
        }
    }

    fn parse_one(&mut self) -> Result<Option<Value>, Fail> {
        let start = self
            .buf
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(self.buf.len());
        if start == self.buf.len() {
            self.buf.clear();
            return Ok(None);
        }
        let mut stream =
            serde_json::Deserializer::from_slice(&self.buf[start..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(value)) => {
                let used = start + stream.byte_offset();
                self.buf.drain(..used);
                Ok(Some(value))
            }
            Some(Err(e)) if e.is_eof() => Ok(None),
            Some(Err(e)) => Err(self.fail(format!(
                "the stream holds something other than JSON events ({e}): {}",
                trimmed(&self.buf, 300)
            ))),
            None => Ok(None),
        }
    }
}

fn tls_config(tls: &TlsSettings) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = if tls.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        if let Some(pem) = &tls.ca_pem {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("the CA certificate is not PEM: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("the CA certificate is unusable: {e}"))?;
            }
            if roots.is_empty() {
                return Err("the CA file holds no certificate".to_string());
            }
        } else {
            // No CA named: the platform's, as kubectl does.
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
        builder.with_root_certificates(roots)
    };
    match &tls.client_cert_pem {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("the client certificate is not PEM: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| format!("the client key is not PEM: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate is unusable: {e}"))
        }
    }
}

/// `--insecure-skip-tls-verify`: any certificate is accepted, signatures are still checked.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
