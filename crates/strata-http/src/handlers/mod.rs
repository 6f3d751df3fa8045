//! Request routing: discovery, OpenAPI, health, metrics and the issuer documents here; resource
//! endpoints in `verbs` and `subresources`, with their options, bodies and rendering beside them.

mod body;
mod health;
mod options;
mod render;
mod reviews;
mod subresources;
mod verbs;

pub(crate) use self::health::Health;
pub(crate) use self::render::protobuf_of;

use http::{header, HeaderMap, Method, Request, Response};
use hyper::body::Incoming;
use serde_json::{json, Value};
use strata_object::Status;

use self::reviews::{
    access_review, rules_review, self_subject_review, token_review, SELF_SUBJECT_ACCESS_REVIEWS,
    SELF_SUBJECT_REVIEWS, SELF_SUBJECT_RULES_REVIEWS, SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS,
};
use self::verbs::resource;
use crate::negotiate::Offer;
use crate::query::Query;
use crate::request::RequestInfo;
use crate::respond::{self, Body, Render};
use crate::{access, discovery, openapi, Frontend};

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> &str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

fn render_for(fe: &Frontend, headers: &HeaderMap, query: &Query) -> Render {
    let ua = header_str(headers, header::USER_AGENT);
    let pretty = query.bool("pretty")
        || ua.starts_with("curl")
        || ua.starts_with("Wget")
        || ua.starts_with("Mozilla/5.0");
    let accept = header_str(headers, header::ACCEPT);
    Render {
        pretty,
        errors: fe.config.formats.error_output(accept, Offer::PLAIN),
    }
}

/// Routes one request to discovery, OpenAPI, health or a resource handler, and records it in
/// the request metrics.
pub async fn route(fe: &Frontend, mut req: Request<Incoming>) -> Response<Body> {
    // The request's log line (`-v=3`); `None`, at the cost of one check, when it is off.
    let line = crate::httplog::Line::start(&mut req, |r| {
        let uri = r.uri();
        crate::metrics::verb(r.method(), uri.path(), uri.query(), r.headers())
    });
    let resp = measured(fe, req).await;
    if let Some(line) = line {
        line.finish(&resp);
    }
    resp
}

/// Serves the request within `--request-timeout` and records it in the metrics.
async fn measured(fe: &Frontend, req: Request<Incoming>) -> Response<Body> {
    let (method, uri) = (req.method(), req.uri());
    // `None` when the request metrics are off (`STRATA_REQUEST_METRICS=off`, for benchmarks).
    let probe = fe.config.request_metrics.then(|| {
        fe.metrics
            .start(method, uri.path(), uri.query(), req.headers(), |g, v, r| {
                fe.registry.lookup(g, v, r).is_some() || is_review(g, v, r)
            })
    });
    // The request's audit (`--audit-policy-file`); `None` when auditing is off.
    let audit = crate::audit::of(&req);
    let _panicking = crate::audit::PanicGuard(audit.clone());
    // Every request but the long-running ones (watches) has `--request-timeout` to finish.
    let query = Query::parse(uri.query());
    let long_running = crate::inflight::long_running(uri.path(), &query);
    if long_running || fe.config.request_timeout.is_zero() {
        let resp = dispatch(fe, req).await;
        return recorded(probe, audited(audit, resp, long_running).await);
    }
    let render = render_for(fe, req.headers(), &query);
    let resp = match tokio::time::timeout(fe.config.request_timeout, dispatch(fe, req)).await {
        Ok(resp) => resp,
        Err(_) => respond::status(
            &Status::timeout(
                "request did not complete within requested timeout - context deadline exceeded",
            ),
            render,
        ),
    };
    recorded(probe, audited(audit, resp, false).await)
}

/// Records the response in the request metrics, if they are on.
fn recorded(probe: Option<crate::metrics::Probe<'_>>, resp: Response<Body>) -> Response<Body> {
    match probe {
        Some(probe) => probe.finish(resp),
        None => resp,
    }
}

/// Completes the request's audit, if it has one, with its response.
async fn audited(
    audit: Option<crate::audit::Handle>,
    resp: Response<Body>,
    long_running: bool,
) -> Response<Body> {
    match audit {
        Some(audit) => audit.finish(resp, long_running).await,
        None => resp,
    }
}

/// The review resources answered here rather than by a registered type.
fn is_review(group: &str, version: &str, resource: &str) -> bool {
    matches!(
        (group, version, resource),
        (
            "authentication.k8s.io",
            "v1",
            "selfsubjectreviews" | "tokenreviews"
        ) | (
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews"
                | "subjectaccessreviews"
                | "localsubjectaccessreviews"
                | "selfsubjectrulesreviews"
        )
    )
}

async fn dispatch(fe: &Frontend, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query = Query::parse(req.uri().query());
    let render = render_for(fe, req.headers(), &query);
    let method = req.method().clone();
    let get_only = |resp: Response<Body>| {
        if method == Method::GET || method == Method::HEAD {
            resp
        } else {
            respond::status(&Status::method_not_allowed(), render)
        }
    };
    let accept = header_str(req.headers(), header::ACCEPT).to_string();
    let audit = crate::audit::of(&req);
    if let Some(resp) = health::answer(fe, &path, &query).await {
        if let Some(audit) = &audit {
            audit_unauthenticated_path(fe, &req, audit, &query).await;
        }
        return get_only(resp);
    }
    match path.as_str() {
        "/version" | "/version/" => {
            if let Some(audit) = &audit {
                audit_unauthenticated_path(fe, &req, audit, &query).await;
            }
            return get_only(version(fe, render));
        }
        _ => {}
    }
    // Everything else needs an identity: a valid token, or anonymous access where allowed.
    let started = fe.config.request_metrics.then(std::time::Instant::now);
    let authenticated = fe
        .authenticator
        .authenticate(
            req.headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
        )
        .await;
    let authorizing = started.map(|started| fe.metrics.authentication(&authenticated, started));
    let user = match authenticated {
        Ok(user) => user,
        Err(s) => {
            if let Some(audit) = &audit {
                let nobody = strata_auth::UserInfo::default();
                audit.unauthenticated(&access::attributes(&method, &path, &query, &nobody));
            }
            return respond::status(&s, render);
        }
    };
    if let Some(audit) = &audit {
        audit
            .authenticated(&access::attributes(&method, &path, &query, &user))
            .await;
    }
    crate::httplog::note_user(&req, &user.name);
    if let Some(rbac) = &fe.rbac {
        rbac.catch_up().await;
    }
    // `Impersonate-*` headers: act as someone else, if allowed to.
    let user = match access::impersonate(fe.authorizer.as_ref(), req.headers(), user) {
        Ok(user) => user,
        Err(s) => return respond::status(&s, render),
    };
    if let Some(audit) = &audit {
        if req.headers().contains_key("impersonate-user") {
            audit.impersonated(&user);
        }
    }
    // Overload: beyond the in-flight limits, 429 at once (watches and system:masters exempt).
    let _slot = if crate::inflight::long_running(&path, &query)
        || user.groups.iter().any(|g| g == "system:masters")
    {
        None
    } else {
        match fe.inflight.enter(crate::inflight::Kind::of(&method)) {
            Some(slot) => Some(slot),
            None => return respond::status(&Status::too_many_requests(), render),
        }
    };
    // Then permission, for what the request asks (a dry run asks the same as the real thing).
    let attrs = access::attributes(&method, &path, &query, &user);
    let decision = strata_auth::authz::check(fe.authorizer.as_ref(), &attrs);
    if let Some(authorizing) = authorizing {
        fe.metrics
            .authorization(&decision, authorizing, fe.rbac.is_some());
    }
    if let Some(audit) = &audit {
        // Strata's authorizers give no reason with their decisions.
        audit.authorized(decision.is_ok(), "");
    }
    if let Err(s) = decision {
        return respond::status(&s, render);
    }
    // What the path names, read once for the check below and for the dispatch.
    let info = RequestInfo::parse(&path);
    if may_name_new_type(fe, &path, info.as_ref()) {
        fe.registry.catch_up_types().await;
    }
    match path.as_str() {
        "/metrics" => return get_only(metrics(fe)),
        SELF_SUBJECT_REVIEWS => {
            return match self_subject_review(fe, req, &user, &accept, render).await {
                Ok(resp) => resp,
                Err(s) => respond::status(&s, render),
            }
        }
        TOKEN_REVIEWS => {
            return match token_review(fe, req, &accept, render).await {
                Ok(resp) => resp,
                Err(s) => respond::status(&s, render),
            }
        }
        SELF_SUBJECT_RULES_REVIEWS => {
            return match rules_review(fe, req, &user, &accept, render).await {
                Ok(resp) => resp,
                Err(s) => respond::status(&s, render),
            }
        }
        SELF_SUBJECT_ACCESS_REVIEWS | SUBJECT_ACCESS_REVIEWS => {
            let kind = if path == SUBJECT_ACCESS_REVIEWS {
                "SubjectAccessReview"
            } else {
                "SelfSubjectAccessReview"
            };
            return match access_review(fe, req, &user, kind, "", &accept, render).await {
                Ok(resp) => resp,
                Err(s) => respond::status(&s, render),
            };
        }
        "/.well-known/openid-configuration" => return get_only(openid_configuration(fe, render)),
        "/openid/v1/jwks" => return get_only(jwks(fe, render)),
        "/api" | "/api/" => {
            let host = header_str(req.headers(), header::HOST).to_string();
            return get_only(discovery_response(
                &accept,
                || discovery::aggregated(&fe.registry, true),
                || discovery::api_versions(&host),
                render,
            ));
        }
        "/apis" | "/apis/" => {
            return get_only(discovery_response(
                &accept,
                || discovery::aggregated(&fe.registry, false),
                || discovery::api_group_list(&fe.registry),
                render,
            ))
        }
        "/openapi/v3" | "/openapi/v3/" => {
            return get_only(respond::json(
                200,
                &openapi::index(&fe.openapi()),
                render,
                "application/json",
            ))
        }
        _ => {}
    }
    if let Some(ns) = path
        .strip_prefix("/apis/authorization.k8s.io/v1/namespaces/")
        .and_then(|rest| rest.strip_suffix("/localsubjectaccessreviews"))
        .filter(|ns| !ns.is_empty() && !ns.contains('/'))
    {
        let ns = ns.to_string();
        return match access_review(
            fe,
            req,
            &user,
            "LocalSubjectAccessReview",
            &ns,
            &accept,
            render,
        )
        .await
        {
            Ok(resp) => resp,
            Err(s) => respond::status(&s, render),
        };
    }
    if let Some(doc_path) = path.strip_prefix("/openapi/v3/") {
        return get_only(match fe.openapi().get(doc_path) {
            Some(doc) => respond::json(200, doc, render, "application/json"),
            None => respond::status(&Status::path_not_found(), render),
        });
    }
    if let Some(resp) = group_discovery(fe, &path, render) {
        return get_only(resp);
    }
    match info {
        Some(info) => {
            let rt = fe
                .registry
                .lookup(&info.group, &info.version, &info.resource);
            // Errors take the type's representations: no protobuf for a type without one.
            let render = match &rt {
                Some(rt) => Render {
                    errors: fe.config.formats.error_output(
                        header_str(req.headers(), header::ACCEPT),
                        Offer::for_type(&rt.info, false),
                    ),
                    ..render
                },
                None => render,
            };
            match resource(fe, req, info, rt, query, &user, render).await {
                Ok(resp) => resp,
                Err(s) => respond::status(&s, render),
            }
        }
        None if path.starts_with("/api/") || path.starts_with("/apis/") => {
            respond::status(&Status::path_not_found(), render)
        }
        None => respond::text(404, "404 page not found\n"),
    }
}

/// Health checks and `/version` are answered without authentication; when auditing, the policy
/// still sees who asked (anonymous when the credentials do not authenticate).
async fn audit_unauthenticated_path(
    fe: &Frontend,
    req: &Request<Incoming>,
    audit: &crate::audit::Handle,
    query: &Query,
) {
    let user = fe
        .authenticator
        .authenticate(
            req.headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
        )
        .await
        .unwrap_or_else(|_| strata_auth::UserInfo::anonymous());
    let attrs = access::attributes(req.method(), req.uri().path(), query, &user);
    audit.authenticated(&attrs).await;
}

/// Whether `path` may need a type defined at run time that this replica does not serve yet:
/// discovery (all groups, a group, a version), OpenAPI, and a resource path naming nothing
/// served. Such requests wait for the registry to catch up with the stored definitions.
/// `info` is what `path` names as a resource path, if anything.
fn may_name_new_type(fe: &Frontend, path: &str, info: Option<&RequestInfo>) -> bool {
    if path.starts_with("/openapi/v3") {
        return true;
    }
    let Some(rest) = path.strip_prefix("/apis") else {
        return false;
    };
    let segments = rest.split('/').filter(|s| !s.is_empty()).count();
    match segments {
        // Discovery of all groups, one group or one version: what it lists may be new.
        0..=2 => true,
        _ => info.is_some_and(|info| {
            !is_review(&info.group, &info.version, &info.resource)
                && fe
                    .registry
                    .lookup(&info.group, &info.version, &info.resource)
                    .is_none()
        }),
    }
}

/// The Prometheus text exposition of the server's metrics, the watch caches' read now.
fn metrics(fe: &Frontend) -> Response<Body> {
    let collector = crate::metrics::CacheCollector(fe.registry.clone());
    let mut resp = Response::new(respond::full(fe.metrics.encode(Some(Box::new(collector)))));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(prometheus_client::encoding::prometheus_text::CONTENT_TYPE),
    );
    resp
}

fn version(fe: &Frontend, render: Render) -> Response<Body> {
    let v = &fe.config.git_version;
    let minor = v
        .trim_start_matches('v')
        .split('.')
        .nth(1)
        .unwrap_or("31")
        .to_string();
    respond::json(
        200,
        &json!({
            "major": "1",
            "minor": minor,
            "gitVersion": v,
            "gitCommit": option_env!("STRATA_GIT_COMMIT").unwrap_or("unknown"),
            "gitTreeState": "clean",
            "buildDate": "1970-01-01T00:00:00Z",
            "goVersion": "rust",
            "compiler": "rustc",
            "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
        }),
        render,
        "application/json",
    )
}

/// Serves the aggregated form when the client lists it in `Accept`, else the legacy form.
fn discovery_response(
    accept: &str,
    aggregated: impl FnOnce() -> Value,
    legacy: impl FnOnce() -> Value,
    render: Render,
) -> Response<Body> {
    for range in strata_codec::media::parse_accept(accept) {
        let m = &range.media;
        if m.essence == "application/json"
            && m.param("as") == Some("APIGroupDiscoveryList")
            && m.param("g") == Some("apidiscovery.k8s.io")
            && m.param("v") == Some("v2")
        {
            let mut resp = respond::json(200, &aggregated(), render, discovery::AGGREGATED_V2);
            resp.headers_mut()
                .insert(header::VARY, header::HeaderValue::from_static("Accept"));
            return resp;
        }
        if range.matches("application/json") && m.param("as").is_none() {
            break;
        }
    }
    respond::json(200, &legacy(), render, "application/json")
}

/// `/api/<v>`, `/apis/<g>`, `/apis/<g>/<v>`.
fn group_discovery(fe: &Frontend, path: &str, render: Render) -> Option<Response<Body>> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let doc = match segments.as_slice() {
        ["api", version] => discovery::api_resource_list(&fe.registry, "", version),
        ["apis", group] => discovery::api_group_for(&fe.registry, group),
        ["apis", group, version] => discovery::api_resource_list(&fe.registry, group, version),
        _ => return None,
    };
    Some(match doc {
        Some(d) => respond::json(200, &d, render, "application/json"),
        None => respond::status(&Status::path_not_found(), render),
    })
}

/// `/.well-known/openid-configuration`: where ServiceAccount token verifiers find the keys.
fn openid_configuration(fe: &Frontend, render: Render) -> Response<Body> {
    let Some(issuer) = fe.registry.token_issuer() else {
        return respond::status(
            &Status::service_unavailable("the token signer is not loaded yet"),
            render,
        );
    };
    let iss = issuer.issuer().trim_end_matches('/');
    let doc = json!({
        "issuer": issuer.issuer(),
        "jwks_uri": format!("{iss}/openid/v1/jwks"),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
    });
    respond::json(200, &doc, render, "application/json")
}

/// `/openid/v1/jwks`: the public key of ServiceAccount tokens.
fn jwks(fe: &Frontend, render: Render) -> Response<Body> {
    match fe.registry.token_issuer() {
        Some(issuer) => respond::json(200, &issuer.jwks(), render, "application/jwk-set+json"),
        None => respond::status(
            &Status::service_unavailable("the token signer is not loaded yet"),
            render,
        ),
    }
}
