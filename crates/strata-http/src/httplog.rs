//! The request log: one line per request, as kube-apiserver writes its `HTTP` lines at klog
//! verbosity 3 (verb, URI, latency, user agent, audit ID, source address, response code), with
//! the user and the response size beside them.
//!
//! Lines are DEBUG events of the target [`TARGET`], which `strata -v=3` turns on (see the
//! binary's logging setup). When the target is off, a request pays one check of the
//! subscriber's cached interest and nothing else: nothing is read, copied or stored for it.
//! The line is written when the response's head is ready; for a watch that is when the stream
//! starts, so its latency is the time to the first byte, not the watch's life.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use http::{header, Request, Response};
use hyper::body::Body as _;

use crate::respond::Body;

/// The target of the request lines.
pub const TARGET: &str = "strata_http::httplog";

/// Whether request lines are written now.
#[inline]
pub fn enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::DEBUG)
}

/// The connection's peer, put in a request's extensions when request lines are written.
#[derive(Clone, Copy, Debug)]
struct Peer(SocketAddr);

/// The request's audit ID, put in its extensions when request lines are written.
#[derive(Clone, Debug)]
struct AuditId(String);

/// Where the handlers leave the authenticated user's name for the request's line.
#[derive(Clone, Debug, Default)]
struct UserSlot(Arc<OnceLock<String>>);

/// Notes the address `req` came from, for its line.
pub(crate) fn note_peer<B>(req: &mut Request<B>, peer: SocketAddr) {
    if enabled() {
        req.extensions_mut().insert(Peer(peer));
    }
}

/// Notes `req`'s audit ID, for its line.
pub(crate) fn note_audit_id<B>(req: &mut Request<B>, id: &str) {
    if enabled() {
        req.extensions_mut().insert(AuditId(id.to_string()));
    }
}

/// Notes who `req` was authenticated as, for its line.
pub(crate) fn note_user<B>(req: &Request<B>, name: &str) {
    if let Some(slot) = req.extensions().get::<UserSlot>() {
        let _ = slot.0.set(name.to_string());
    }
}

/// A request whose line is written when [`Line::finish`] sees its response.
pub(crate) struct Line {
    started: Instant,
    verb: &'static str,
    uri: String,
    user_agent: String,
    src_ip: Option<SocketAddr>,
    audit_id: Option<String>,
    user: UserSlot,
}

impl Line {
    /// Starts the line of `req` when request lines are written; `None` (having read nothing)
    /// when they are not. `verb` names the request as kube-apiserver's metrics and logs do.
    pub(crate) fn start<B>(
        req: &mut Request<B>,
        verb: impl FnOnce(&Request<B>) -> &'static str,
    ) -> Option<Line> {
        if !enabled() {
            return None;
        }
        let user = UserSlot::default();
        req.extensions_mut().insert(user.clone());
        let uri = req.uri().path_and_query().map_or_else(
            || req.uri().path().to_string(),
            |pq| pq.as_str().to_string(),
        );
        let user_agent = req
            .headers()
            .get(header::USER_AGENT)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        Some(Line {
            started: Instant::now(),
            verb: verb(req),
            uri,
            user_agent,
            src_ip: req.extensions().get::<Peer>().map(|p| p.0),
            audit_id: req.extensions().get::<AuditId>().map(|a| a.0.clone()),
            user,
        })
    }

    /// Writes the line of the request answered with `resp`.
    pub(crate) fn finish(self, resp: &Response<Body>) {
        let latency = self.started.elapsed();
        tracing::debug!(
            target: TARGET,
            verb = self.verb,
            uri = %self.uri,
            user = self.user.0.get().map(String::as_str),
            status = resp.status().as_u16(),
            latency = ?latency,
            latency_seconds = latency.as_secs_f64(),
            bytes = resp.body().size_hint().exact(),
            user_agent = %self.user_agent,
            audit_id = self.audit_id.as_deref(),
            src_ip = self.src_ip.map(tracing::field::display),
            "HTTP"
        );
    }
}
