//! Request routing and the per-verb handlers of resource endpoints.

use bytes::Bytes;
use http::{header, HeaderMap, Method, Request, Response};
use hyper::body::Incoming;
use serde_json::{json, Map, Value};
use strata_auth::UserInfo;
use strata_object::{GroupVersionKind, Object, Status};
use strata_registry::{
    list_json, list_objects, DeleteOptions, FieldValidation, ListOptions, ObjectList, PatchKind,
    RegisteredType, WatchOptions, WriteOptions,
};

use crate::negotiate::{self, Offer, Output};
use crate::query::Query;
use crate::request::RequestInfo;
use crate::respond::{self, Body, Render};
use crate::table::{self, IncludeObject};
use crate::{access, discovery, openapi, read_body, Frontend};

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
        errors: fe.config.formats.error_output(accept),
    }
}

/// Routes one request to discovery, OpenAPI, health or a resource handler.
pub async fn route(fe: &Frontend, req: Request<Incoming>) -> Response<Body> {
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
    match path.as_str() {
        "/healthz" | "/livez" | "/readyz" | "/healthz/ping" | "/livez/ping" | "/readyz/ping" => {
            return get_only(respond::text(200, "ok"))
        }
        "/version" | "/version/" => return get_only(version(fe, render)),
        _ => {}
    }
    // Everything else needs an identity: a valid token, or anonymous access where allowed.
    let user = match fe
        .authenticator
        .authenticate(
            req.headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
        )
        .await
    {
        Ok(user) => user,
        Err(s) => return respond::status(&s, render),
    };
    if let Some(rbac) = &fe.rbac {
        rbac.catch_up().await;
    }
    // `Impersonate-*` headers: act as someone else, if allowed to.
    let user = match access::impersonate(fe.authorizer.as_ref(), req.headers(), user) {
        Ok(user) => user,
        Err(s) => return respond::status(&s, render),
    };
    // Then permission, for what the request asks (a dry run asks the same as the real thing).
    let attrs = access::attributes(&method, &path, &query, &user);
    if let Err(s) = strata_auth::authz::check(fe.authorizer.as_ref(), &attrs) {
        return respond::status(&s, render);
    }
    match path.as_str() {
        "/metrics" => return get_only(metrics(fe)),
        SELF_SUBJECT_REVIEWS => {
            return match self_subject_review(fe, req, &user, &accept, render).await {
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
    match RequestInfo::parse(&path) {
        Some(info) => {
            // A type without a protobuf form answers its errors in JSON too.
            let render = match fe
                .registry
                .lookup(&info.group, &info.version, &info.resource)
            {
                Some(rt) if !rt.info.protobuf => render.without_protobuf(),
                _ => render,
            };
            match resource(fe, req, info, query, &user, render).await {
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

/// Prometheus text exposition of the watch caches' counters.
fn metrics(fe: &Frontend) -> Response<Body> {
    use std::fmt::Write;
    let mut out = String::new();
    let families: [(&str, &str, &str); 5] = [
        (
            "strata_watch_cache_objects",
            "gauge",
            "Objects held by the watch cache.",
        ),
        (
            "strata_watch_cache_window_events",
            "gauge",
            "Events in the watch cache's window.",
        ),
        ("strata_watch_cache_watchers", "gauge", "Open watchers."),
        (
            "strata_watch_cache_events_dispatched_total",
            "counter",
            "Events handed to watchers.",
        ),
        (
            "strata_watch_cache_watchers_overflowed_total",
            "counter",
            "Watchers closed for falling behind.",
        ),
    ];
    let all = fe.registry.cache_metrics();
    let labels = |m: &strata_registry::CacheMetrics| {
        let (resource, group) = m.resource.split_once('.').unwrap_or((&m.resource, ""));
        format!("group=\"{group}\",resource=\"{resource}\"")
    };
    for (i, (name, kind, help)) in families.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for m in &all {
            let v = match i {
                0 => m.objects as u64,
                1 => m.window_events as u64,
                2 => m.watchers as u64,
                3 => m.events_dispatched,
                _ => m.watchers_overflowed,
            };
            let _ = writeln!(out, "{name}{{{}}} {v}", labels(m));
        }
    }
    let name = "strata_watch_cache_events_encoded_total";
    let _ = writeln!(
        out,
        "# HELP {name} Object versions encoded by the watch cache, per encoding.\n# TYPE {name} counter"
    );
    for m in &all {
        for (encoding, n) in &m.encodes {
            let _ = writeln!(out, "{name}{{{},encoding=\"{encoding}\"}} {n}", labels(m));
        }
    }
    let mut resp = Response::new(respond::full(out));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
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

/// Parses `dryRun` values: absent or empty is an ordinary request, `All` a dry run.
fn dry_run(query: &Query, values: &[String], options_kind: &str) -> Result<bool, Status> {
    let mut all: Vec<String> = query.all("dryRun").into_iter().map(String::from).collect();
    all.extend(values.iter().cloned());
    let bad: Vec<&String> = all
        .iter()
        .filter(|v| !v.is_empty() && *v != "All")
        .collect();
    if !bad.is_empty() {
        let listed: Vec<String> = bad.iter().map(|v| format!("{v:?}")).collect();
        return Err(Status::invalid(
            "meta.k8s.io",
            options_kind,
            "",
            &[strata_object::field::FieldError::new(
                strata_object::field::FieldErrorKind::NotSupported,
                "dryRun",
                Some(format!("[]string{{{}}}", listed.join(", "))),
                "supported values: \"All\"",
            )],
        ));
    }
    Ok(all.iter().any(|v| v == "All"))
}

fn write_options(
    query: &Query,
    headers: &HeaderMap,
    options_kind: &str,
) -> Result<WriteOptions, Status> {
    let validation = query.string("fieldValidation");
    let Some(field_validation) = FieldValidation::parse(&validation) else {
        return Err(Status::invalid(
            "meta.k8s.io",
            options_kind,
            "",
            &[strata_object::field::FieldError::not_supported(
                "fieldValidation",
                &validation,
                &["", "Ignore", "Strict", "Warn"],
            )],
        ));
    };
    let mut field_manager = query.string("fieldManager");
    strata_registry::validate_manager(&field_manager, options_kind)?;
    if field_manager.is_empty() {
        field_manager = strata_registry::default_manager(header_str(headers, header::USER_AGENT));
    }
    Ok(WriteOptions {
        dry_run: dry_run(query, &[], options_kind)?,
        field_manager,
        field_validation,
        force: false,
        subresource: String::new(),
        admit: None,
    })
}

fn list_options(query: &Query) -> Result<ListOptions, Status> {
    let limit = query.int("limit")?.unwrap_or(0).max(0) as usize;
    if query.has("sendInitialEvents") {
        return Err(Status::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            &[strata_object::field::FieldError::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            )],
        ));
    }
    Ok(ListOptions {
        limit,
        continue_token: query.string("continue"),
        resource_version: query.string("resourceVersion"),
        resource_version_match: query.string("resourceVersionMatch"),
        label_selector: query.string("labelSelector"),
        field_selector: query.string("fieldSelector"),
    })
}

/// The options of a watch; a name in the path (`/watch/…/<name>`) selects that one object.
fn watch_options(query: &Query, name: &str) -> Result<WatchOptions, Status> {
    let mut field_selector = query.string("fieldSelector");
    if !name.is_empty() {
        let selector = strata_object::FieldSelector::parse(
            &field_selector,
            &[
                "metadata.name".to_string(),
                "metadata.namespace".to_string(),
            ],
            strata_object::selector::UnknownFieldStyle::NotKnown,
        );
        if let Ok(sel) = selector {
            if sel.required("metadata.name").is_some_and(|n| n != name) {
                return Err(Status::bad_request(
                    "fieldSelector metadata.name doesn't match requested name",
                ));
            }
        }
        let term = format!(
            "metadata.name={}",
            name.replace('\\', "\\\\").replace(',', "\\,")
        );
        field_selector = if field_selector.is_empty() {
            term
        } else {
            format!("{field_selector},{term}")
        };
    }
    query.int("timeoutSeconds")?;
    Ok(WatchOptions {
        resource_version: query.string("resourceVersion"),
        resource_version_match: query.string("resourceVersionMatch"),
        send_initial_events: query
            .has("sendInitialEvents")
            .then(|| query.bool("sendInitialEvents")),
        allow_bookmarks: query.bool("allowWatchBookmarks"),
        label_selector: query.string("labelSelector"),
        field_selector,
    })
}

/// How long a watch runs: `timeoutSeconds`, or like Kubernetes a random 30–60 minutes.
fn watch_timeout(query: &Query) -> Result<std::time::Duration, Status> {
    Ok(match query.int("timeoutSeconds")? {
        Some(s) if s > 0 => std::time::Duration::from_secs(s as u64),
        _ => std::time::Duration::from_secs(1800 + u64::from(rand_seconds() % 1800)),
    })
}

fn rand_seconds() -> u32 {
    uuid::Uuid::new_v4().as_u128() as u32
}

/// A list page in the negotiated representation.
fn list_response(
    rt: &RegisteredType,
    list: ObjectList,
    output: &Output,
    include: IncludeObject,
    render: Render,
) -> Result<Response<Body>, Status> {
    Ok(match output {
        Output::Json if !render.pretty => {
            respond::bytes(200, list_json(&rt.info, &list), "application/json")
        }
        Output::Protobuf(name) => {
            // Assembled from each object's message, encoded once per object version.
            let (api_version, kind) = (rt.info.api_version(), &rt.info.kind);
            let items = list
                .items
                .iter()
                .map(|obj| protobuf_message_of(obj, &api_version, kind))
                .collect::<Result<Vec<Bytes>, Status>>()?;
            let body = strata_codec::proto::list_envelope(
                &rt.info.api_version(),
                &rt.info.list_kind,
                &list.resource_version,
                &list.continue_token,
                list.remaining_item_count,
                items.iter().map(|b| b.as_ref()),
            );
            respond::bytes(200, body, name)
        }
        Output::Json | Output::Yaml | Output::Cbor => {
            let v: Value = serde_json::from_slice(&list_json(&rt.info, &list))
                .map_err(|e| Status::internal(e.to_string()))?;
            respond::value(200, &v, output, render)
        }
        Output::Table(target) => {
            let mut meta = Map::new();
            meta.insert("resourceVersion".into(), json!(list.resource_version));
            if !list.continue_token.is_empty() {
                meta.insert("continue".into(), json!(list.continue_token));
            }
            if let Some(n) = list.remaining_item_count {
                meta.insert("remainingItemCount".into(), json!(n));
            }
            let items = list_objects(&list)?;
            let t = table::table(&items, meta, include, target, true);
            respond::json(200, &t, render, "application/json")
        }
    })
}

/// The enveloped protobuf of a cached object, made once per object version.
pub(crate) fn protobuf_of(obj: &strata_registry::CachedObject) -> Result<Bytes, Status> {
    cached_protobuf(obj, "protobuf", strata_codec::proto::encode)
}

/// The protobuf message (no envelope) of a cached object of `kind`, made once per object
/// version: the items of protobuf lists.
fn protobuf_message_of(
    obj: &strata_registry::CachedObject,
    api_version: &str,
    kind: &str,
) -> Result<Bytes, Status> {
    cached_protobuf(obj, "protobuf-message", |v| {
        strata_codec::proto::encode_message(api_version, kind, v)
    })
}

/// One protobuf encoding of a cached object, kept under `name` on the object version. An
/// object that cannot be encoded (no valid encoding is empty) is logged once and answered 500.
fn cached_protobuf<E: std::fmt::Display>(
    obj: &strata_registry::CachedObject,
    name: &str,
    encode: impl FnOnce(&Value) -> Result<Vec<u8>, E>,
) -> Result<Bytes, Status> {
    let bytes = obj.encoded(name, |c| {
        let encoded = serde_json::from_slice::<Value>(c.json())
            .map_err(|e| e.to_string())
            .and_then(|v| encode(&v).map_err(|e| e.to_string()));
        match encoded {
            Ok(b) => Bytes::from(b),
            Err(e) => {
                tracing::error!(key = c.key(), %e, "cannot encode a stored object as protobuf");
                Bytes::new()
            }
        }
    });
    if bytes.is_empty() {
        return Err(Status::internal(format!(
            "object {} has no protobuf encoding",
            obj.key()
        )));
    }
    Ok(bytes)
}

/// Reads and decodes an object request body, checking size and content type. JSON and YAML
/// bodies report their duplicate members for field validation.
async fn object_body(
    fe: &Frontend,
    req: Request<Incoming>,
    expected: &GroupVersionKind,
) -> Result<strata_registry::Body, Status> {
    let content_type = header_str(req.headers(), header::CONTENT_TYPE).to_string();
    let format = fe.config.formats.body_format(&content_type)?;
    let bytes = body_bytes(fe, req).await?;
    decode_strict(format, &bytes, expected)
}

/// Decodes a request body; a protobuf body's envelope names its type, else `expected` is
/// assumed.
fn decode_body(
    format: negotiate::BodyFormat,
    bytes: &[u8],
    expected: &GroupVersionKind,
) -> Result<Value, Status> {
    decode_strict(format, bytes, expected).map(|b| b.value)
}

fn decode_strict(
    format: negotiate::BodyFormat,
    bytes: &[u8],
    expected: &GroupVersionKind,
) -> Result<strata_registry::Body, Status> {
    let decoded = match format {
        negotiate::BodyFormat::Json => strata_codec::strict::json(bytes),
        negotiate::BodyFormat::Yaml => strata_codec::strict::yaml(bytes),
        // Neither protobuf nor CBOR can carry a duplicate field: CBOR's decoder refuses
        // repeated map keys outright, as Kubernetes' does.
        negotiate::BodyFormat::Protobuf => {
            strata_codec::proto::decode(bytes, &expected.api_version(), &expected.kind).map(
                |value| strata_codec::strict::Decoded {
                    value,
                    duplicates: Vec::new(),
                },
            )
        }
        negotiate::BodyFormat::Cbor => {
            strata_codec::cbor::decode(bytes).map(|value| strata_codec::strict::Decoded {
                value,
                duplicates: Vec::new(),
            })
        }
    };
    decoded
        .map(|d| strata_registry::Body {
            value: d.value,
            duplicates: d.duplicates,
        })
        .map_err(|e| Status::bad_request(e.to_string()))
}

/// The patch type and body format named by a PATCH request's `Content-Type`, or 415.
fn patch_kind(
    formats: negotiate::Formats,
    content_type: &str,
) -> Result<(PatchKind, negotiate::BodyFormat), Status> {
    use negotiate::BodyFormat;
    let essence = strata_codec::MediaType::parse(content_type)
        .map(|m| m.essence)
        .unwrap_or_default();
    match essence.as_str() {
        "application/json-patch+json" => Ok((PatchKind::Json, BodyFormat::Json)),
        "application/merge-patch+json" => Ok((PatchKind::Merge, BodyFormat::Json)),
        "application/strategic-merge-patch+json" => Ok((PatchKind::Strategic, BodyFormat::Json)),
        "application/apply-patch+yaml" => Ok((PatchKind::Apply, BodyFormat::Yaml)),
        "application/apply-patch+cbor" if formats.cbor => Ok((PatchKind::Apply, BodyFormat::Cbor)),
        _ if formats.cbor => Err(Status::unsupported_media_type(&PATCH_TYPES)),
        _ => Err(Status::unsupported_media_type(&PATCH_TYPES[..4])),
    }
}

const PATCH_TYPES: [&str; 5] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/apply-patch+cbor",
];

/// A write's response: the object, with one `Warning` header per field-validation warning.
fn written_response(
    code: u16,
    written: strata_registry::Written,
    output: &Output,
    include: IncludeObject,
    render: Render,
) -> Response<Body> {
    let mut resp = object_response(code, written.object, output, include, render);
    respond::add_warnings(&mut resp, &written.warnings);
    resp
}

async fn body_bytes(fe: &Frontend, req: Request<Incoming>) -> Result<Bytes, Status> {
    let limit = fe.config.max_body_bytes;
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > limit as u64 {
            return Err(Status::too_large(limit));
        }
    }
    match read_body(req.into_body(), limit).await {
        Ok(Some(b)) => Ok(b),
        Ok(None) => Err(Status::too_large(limit)),
        Err(e) => Err(Status::bad_request(format!(
            "failed to read the request body: {e}"
        ))),
    }
}

/// Renders one object in the negotiated representation.
fn object_response(
    code: u16,
    obj: Object,
    output: &Output,
    include: IncludeObject,
    render: Render,
) -> Response<Body> {
    match output {
        Output::Json | Output::Yaml | Output::Protobuf(_) | Output::Cbor => {
            respond::value(code, &obj.into_value(), output, render)
        }
        Output::Table(target) => {
            let mut meta = Map::new();
            meta.insert("resourceVersion".into(), json!(obj.resource_version()));
            let t = table::table(&[obj], meta, include, target, true);
            respond::json(code, &t, render, "application/json")
        }
    }
}

async fn resource(
    fe: &Frontend,
    req: Request<Incoming>,
    info: RequestInfo,
    query: Query,
    user: &UserInfo,
    render: Render,
) -> Result<Response<Body>, Status> {
    let rt = fe
        .registry
        .lookup(&info.group, &info.version, &info.resource)
        .ok_or_else(Status::path_not_found)?;
    let namespaced = rt.info.namespaced();
    // A namespaced object needs a namespace in its path; a cluster-scoped type never has one.
    if (!namespaced && !info.namespace.is_empty())
        || (namespaced && info.namespace.is_empty() && !info.name.is_empty())
    {
        return Err(Status::path_not_found());
    }
    let accept = header_str(req.headers(), header::ACCEPT).to_string();
    let method = req.method().clone();
    if !info.subresource.is_empty() {
        return subresource(fe, req, &rt, &info, &accept, render).await;
    }
    let ns = info.namespace.as_str();
    let name = info.name.as_str();
    let include = IncludeObject::parse(query.get("includeObject").unwrap_or(""))?;
    let with_table = Offer::for_type(&rt.info, true);
    let plain = Offer::for_type(&rt.info, false);
    match (method, name.is_empty()) {
        (Method::GET | Method::HEAD, _) if info.watch || query.bool("watch") => {
            if !rt.info.has_verb(strata_object::Verb::Watch) {
                return Err(Status::method_not_allowed_for(&rt.info.resource, "watch"));
            }
            let output = fe.config.formats.stream_output(&accept, with_table)?;
            let opts = watch_options(&query, name)?;
            let timeout = watch_timeout(&query)?;
            let stream = fe.registry.watch(rt.clone(), ns, &opts).await?;
            let content_type = match &output {
                Output::Protobuf(name) => format!("{name};stream=watch"),
                Output::Cbor => negotiate::CBOR_SEQ.to_string(),
                _ => "application/json".to_string(),
            };
            let mut resp = Response::new(crate::watch::WatchBody::body(
                stream,
                output,
                include,
                timeout,
                fe.closing.subscribe(),
            ));
            if let Ok(v) = http::HeaderValue::from_str(&content_type) {
                resp.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            Ok(resp)
        }
        (Method::GET | Method::HEAD, true) => {
            let output = fe.config.formats.output(&accept, with_table)?;
            let opts = list_options(&query)?;
            let list = fe.registry.list(&rt, ns, &opts).await?;
            let mut resp = list_response(&rt, list, &output, include, render)?;
            resp.extensions_mut().insert(respond::Compressible);
            Ok(resp)
        }
        (Method::GET | Method::HEAD, false) => {
            let output = fe.config.formats.output(&accept, with_table)?;
            let obj = fe
                .registry
                .get_cached(&rt, ns, name, query.get("resourceVersion").unwrap_or(""))
                .await?;
            let mut resp = if output == Output::Json && !render.pretty {
                let mut body = Vec::with_capacity(obj.json().len() + 1);
                body.extend_from_slice(obj.json());
                body.push(b'\n');
                respond::bytes(200, body, "application/json")
            } else if let Output::Protobuf(name) = output {
                respond::bytes(200, protobuf_of(&obj)?, name)
            } else {
                let obj = strata_registry::cache::to_object(&obj)?;
                object_response(200, obj, &output, include, render)
            };
            resp.extensions_mut().insert(respond::Compressible);
            Ok(resp)
        }
        (Method::POST, true) => {
            let output = fe.config.formats.output(&accept, plain)?;
            let mut opts = write_options(&query, req.headers(), "CreateOptions")?;
            opts.admit = access::escalation_check(fe.rbac.as_ref(), &rt, user);
            let body = object_body(fe, req, &rt.info.gvk()).await?;
            let written = fe.registry.create(&rt, ns, body, &opts).await?;
            Ok(written_response(201, written, &output, include, render))
        }
        (Method::PUT, false) => {
            let output = fe.config.formats.output(&accept, plain)?;
            let mut opts = write_options(&query, req.headers(), "UpdateOptions")?;
            opts.admit = access::escalation_check(fe.rbac.as_ref(), &rt, user);
            let body = object_body(fe, req, &rt.info.gvk()).await?;
            let written = fe.registry.update(&rt, ns, name, body, &opts).await?;
            Ok(written_response(200, written, &output, include, render))
        }
        (Method::PATCH, false) => {
            let output = fe.config.formats.output(&accept, plain)?;
            let mut opts = write_options(&query, req.headers(), "PatchOptions")?;
            opts.admit = access::escalation_check(fe.rbac.as_ref(), &rt, user);
            let written = patch_object(fe, req, &rt, ns, name, &query, opts).await?;
            let code = if written.created { 201 } else { 200 };
            Ok(written_response(code, written, &output, include, render))
        }
        (Method::DELETE, false) => {
            let output = fe.config.formats.output(&accept, plain)?;
            let opts = delete_options(fe, req, &query).await?;
            // Invalid options are refused before the unsafe option is authorized.
            opts.validate()?;
            if opts.ignore_store_read_error && fe.registry.config().unsafe_malformed_object_deletion
            {
                authorize_unsafe_delete(fe, &rt, &info, user)?;
            }
            let deleted = fe.registry.delete(&rt, ns, name, &opts).await?;
            let code = if !deleted.removed && opts.accepted_status() {
                202
            } else {
                200
            };
            Ok(match deleted.object {
                Some(obj) => object_response(code, obj, &output, include, render),
                // Nothing readable was left to return (a forced deletion).
                None => {
                    let mut status = Status::success(Some(strata_object::StatusDetails {
                        name: name.to_string(),
                        kind: rt.info.kind.clone(),
                        ..Default::default()
                    }));
                    status.code = code;
                    respond::value(code, &status.to_value(), &output, render)
                }
            })
        }
        (Method::DELETE, true) => {
            if !rt.info.has_verb(strata_object::Verb::DeleteCollection) {
                return Err(Status::method_not_allowed_for(
                    &rt.info.resource,
                    "deletecollection",
                ));
            }
            let output = fe.config.formats.output(&accept, plain)?;
            let list_opts = list_options(&query)?;
            let opts = delete_options(fe, req, &query).await?;
            let status = fe
                .registry
                .delete_collection(&rt, ns, &list_opts, &opts)
                .await?;
            Ok(respond::value(200, &status.to_value(), &output, render))
        }
        _ => Err(Status::method_not_allowed()),
    }
}

/// A PATCH of any of the four types, of an object or through a sub-resource (`opts`).
async fn patch_object(
    fe: &Frontend,
    req: Request<Incoming>,
    rt: &RegisteredType,
    ns: &str,
    name: &str,
    query: &Query,
    mut opts: WriteOptions,
) -> Result<strata_registry::Written, Status> {
    let (kind, format) = patch_kind(
        fe.config.formats,
        header_str(req.headers(), header::CONTENT_TYPE),
    )?;
    opts.force = query.has("force") && query.bool("force");
    if kind == PatchKind::Apply {
        if query.string("fieldManager").is_empty() {
            return Err(Status::invalid(
                "meta.k8s.io",
                "PatchOptions",
                "",
                &[strata_object::field::FieldError::required(
                    "fieldManager",
                    "is required for apply patch",
                )],
            ));
        }
    } else if opts.force {
        return Err(Status::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            &[strata_object::field::FieldError::forbidden(
                "force",
                "may not be specified for non-apply patch",
            )],
        ));
    }
    let bytes = body_bytes(fe, req).await?;
    let body = decode_strict(format, &bytes, &rt.info.gvk()).map_err(|mut s| {
        s.message = format!("error decoding patch: {}", s.message);
        s
    })?;
    fe.registry.patch(rt, ns, name, kind, body, &opts).await
}

/// DeleteOptions from the body when there is one (any accepted encoding), else from the
/// query string, as Kubernetes reads them; `preconditions` have no query form.
async fn delete_options(
    fe: &Frontend,
    req: Request<Incoming>,
    query: &Query,
) -> Result<DeleteOptions, Status> {
    let content_type = header_str(req.headers(), header::CONTENT_TYPE).to_string();
    let bytes = body_bytes(fe, req).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(DeleteOptions {
            dry_run: dry_run(query, &[], "DeleteOptions")?,
            grace_period_seconds: query.int("gracePeriodSeconds")?,
            preconditions: None,
            orphan_dependents: query_bool(query, "orphanDependents")?,
            propagation_policy: query.get("propagationPolicy").map(String::from),
            ignore_store_read_error: query_bool(
                query,
                "ignoreStoreReadErrorWithClusterBreakingPotential",
            )?
            .unwrap_or(false),
        });
    }
    let format = fe.config.formats.body_format(&content_type)?;
    let delete_options = GroupVersionKind::new("meta.k8s.io", "v1", "DeleteOptions");
    let Value::Object(body) = decode_body(format, &bytes, &delete_options)? else {
        return Err(Status::bad_request("DeleteOptions must be an object"));
    };
    if let Some(kind) = body.get("kind").and_then(Value::as_str) {
        if kind != "DeleteOptions" {
            return Err(Status::bad_request(format!(
                "DeleteOptions in version \"v1\" cannot be handled as a DeleteOptions: the kind in the data ({kind}) does not match"
            )));
        }
    }
    let wrong = |field: &str, want: &str| {
        Status::bad_request(format!(
            "DeleteOptions in version \"v1\" cannot be handled as a DeleteOptions: {field}: expected {want}"
        ))
    };
    let string = |field: &str| match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(v)) => Ok(Some(v.clone())),
        Some(_) => Err(wrong(field, "string")),
    };
    let boolean = |field: &str| match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(wrong(field, "boolean")),
    };
    let grace_period_seconds = match body.get("gracePeriodSeconds") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .ok_or_else(|| wrong("gracePeriodSeconds", "integer"))?,
        ),
    };
    let dry_run_values: Vec<String> = match body.get("dryRun") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(String::from))
            .collect::<Option<_>>()
            .ok_or_else(|| wrong("dryRun", "list of strings"))?,
        Some(_) => return Err(wrong("dryRun", "list of strings")),
    };
    let preconditions = match body.get("preconditions") {
        None | Some(Value::Null) => None,
        Some(Value::Object(p)) => {
            let field = |k: &str| match p.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(v)) => Ok(Some(v.clone())),
                Some(_) => Err(wrong(&format!("preconditions.{k}"), "string")),
            };
            Some(strata_registry::Preconditions {
                uid: field("uid")?,
                resource_version: field("resourceVersion")?,
            })
        }
        Some(_) => return Err(wrong("preconditions", "object")),
    };
    Ok(DeleteOptions {
        dry_run: dry_run(&Query::default(), &dry_run_values, "DeleteOptions")?,
        grace_period_seconds,
        preconditions,
        orphan_dependents: boolean("orphanDependents")?,
        propagation_policy: string("propagationPolicy")?,
        ignore_store_read_error: boolean("ignoreStoreReadErrorWithClusterBreakingPotential")?
            .unwrap_or(false),
    })
}

/// A boolean query parameter that must be `true` or `false` when present (400 otherwise).
fn query_bool(query: &Query, key: &str) -> Result<Option<bool>, Status> {
    match query.get(key) {
        None => Ok(None),
        Some(v) => match v.to_ascii_lowercase().as_str() {
            "true" | "1" | "" => Ok(Some(true)),
            "false" | "0" => Ok(Some(false)),
            _ => Err(Status::bad_request(format!(
                "invalid value for query parameter {key}: strconv.ParseBool: parsing {v:?}: invalid syntax"
            ))),
        },
    }
}

/// The check forced deletion needs beyond `delete`: the verb
/// `unsafe-delete-ignore-read-errors` on the same object, never through a sub-resource.
fn authorize_unsafe_delete(
    fe: &Frontend,
    rt: &RegisteredType,
    info: &RequestInfo,
    user: &UserInfo,
) -> Result<(), Status> {
    let attrs = strata_auth::authz::Attributes {
        user: user.clone(),
        verb: "unsafe-delete-ignore-read-errors".into(),
        namespace: info.namespace.clone(),
        api_group: rt.info.group.clone(),
        api_version: rt.info.version.clone(),
        resource: rt.info.resource.clone(),
        subresource: info.subresource.clone(),
        name: info.name.clone(),
        resource_request: true,
        path: String::new(),
    };
    if !info.subresource.is_empty() {
        return Err(Status::forbidden(
            &rt.info.group,
            &rt.info.resource,
            &info.name,
            "ignoreStoreReadErrorWithClusterBreakingPotential delete option is not allowed on a subresource or non-resource request",
        ));
    }
    strata_auth::authz::check(fe.authorizer.as_ref(), &attrs)
}

async fn subresource(
    fe: &Frontend,
    req: Request<Incoming>,
    rt: &RegisteredType,
    info: &RequestInfo,
    accept: &str,
    render: Render,
) -> Result<Response<Body>, Status> {
    let sub = rt
        .info
        .subresource(&info.subresource)
        .ok_or_else(Status::path_not_found)?;
    // Reading a namespace's status is reading the namespace.
    if sub.name == "status" && req.method() == Method::GET {
        let output = fe
            .config
            .formats
            .output(accept, Offer::for_type(&rt.info, true))?;
        let obj = fe.registry.get(rt, &info.namespace, &info.name, "").await?;
        return Ok(object_response(
            200,
            obj,
            &output,
            IncludeObject::Metadata,
            render,
        ));
    }
    if sub.name == "token" && req.method() == Method::POST {
        let output = fe.config.formats.output(accept, Offer::PLAIN)?;
        let query = Query::parse(req.uri().query());
        // Validated like any create; a token request stores nothing either way.
        dry_run(&query, &[], "CreateOptions")?;
        let body = object_body(fe, req, &sub.kind).await?;
        let answer = fe
            .registry
            .create_token(rt, &info.namespace, &info.name, body.value)
            .await?;
        return Ok(respond::value(201, &answer, &output, render));
    }
    let writable = match *req.method() {
        Method::PUT => sub.verbs.contains(&strata_object::Verb::Update),
        Method::PATCH => sub.verbs.contains(&strata_object::Verb::Patch),
        _ => false,
    };
    if writable && sub.kind.kind == rt.info.kind {
        // `status` and `finalize`: the object itself, of which the sub-resource may change
        // only its part.
        let output = fe
            .config
            .formats
            .output(accept, Offer::for_type(&rt.info, false))?;
        let query = Query::parse(req.uri().query());
        let put = req.method() == Method::PUT;
        let options_kind = if put { "UpdateOptions" } else { "PatchOptions" };
        let mut opts = write_options(&query, req.headers(), options_kind)?;
        opts.subresource = sub.name.clone();
        let (ns, name) = (info.namespace.as_str(), info.name.as_str());
        let written = if put {
            let body = object_body(fe, req, &rt.info.gvk()).await?;
            fe.registry.update(rt, ns, name, body, &opts).await?
        } else {
            patch_object(fe, req, rt, ns, name, &query, opts).await?
        };
        return Ok(written_response(
            200,
            written,
            &output,
            IncludeObject::Metadata,
            render,
        ));
    }
    Err(Status::method_not_allowed_for(
        &format!("{}/{}", rt.info.resource, sub.name),
        &req.method().as_str().to_ascii_lowercase(),
    ))
}

/// The body of a POST to a virtual type (the reviews): an object of `kind` (or of no stated
/// kind; an empty body is an empty object), in any accepted encoding. Other methods are 405.
async fn virtual_body(
    fe: &Frontend,
    req: Request<Incoming>,
    group: &str,
    kind: &str,
) -> Result<Value, Status> {
    if req.method() != Method::POST {
        return Err(Status::method_not_allowed());
    }
    let content_type = header_str(req.headers(), header::CONTENT_TYPE).to_string();
    let bytes = body_bytes(fe, req).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let format = fe.config.formats.body_format(&content_type)?;
    let body = decode_body(format, &bytes, &GroupVersionKind::new(group, "v1", kind))?;
    if !body.is_object() {
        return Err(Status::bad_request(format!("a {kind} must be an object")));
    }
    if let Some(other) = body
        .get("kind")
        .and_then(Value::as_str)
        .filter(|k| *k != kind)
    {
        return Err(Status::bad_request(format!(
            "{kind} in version \"v1\" cannot be handled as a {kind}: the kind in the data ({other}) does not match"
        )));
    }
    Ok(body)
}

/// The path of `authentication.k8s.io/v1` SelfSubjectReviews.
const SELF_SUBJECT_REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// POST of a SelfSubjectReview (`kubectl auth whoami`): the request's own identity; nothing is
/// stored.
async fn self_subject_review(
    fe: &Frontend,
    req: Request<Incoming>,
    user: &UserInfo,
    accept: &str,
    render: Render,
) -> Result<Response<Body>, Status> {
    let output = fe.config.formats.output(accept, Offer::PLAIN)?;
    // The body says nothing the answer needs; it is checked all the same.
    virtual_body(fe, req, "authentication.k8s.io", "SelfSubjectReview").await?;
    let review = json!({
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": user.to_value()},
    });
    Ok(respond::value(201, &review, &output, render))
}

const SELF_SUBJECT_ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
const SUBJECT_ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// POST of a SubjectAccessReview (about anyone), a LocalSubjectAccessReview (about anyone, in
/// `namespace`) or a SelfSubjectAccessReview (about the caller, as `kubectl auth can-i` asks):
/// the authorizer's answer in `status`; nothing is stored.
async fn access_review(
    fe: &Frontend,
    req: Request<Incoming>,
    user: &UserInfo,
    kind: &str,
    namespace: &str,
    accept: &str,
    render: Render,
) -> Result<Response<Body>, Status> {
    let output = fe.config.formats.output(accept, Offer::PLAIN)?;
    let mut review = virtual_body(fe, req, "authorization.k8s.io", kind).await?;
    let spec = review.get("spec").cloned().unwrap_or(Value::Null);
    let invalid = |errors: Vec<strata_object::field::FieldError>| {
        Status::invalid("authorization.k8s.io", kind, "", &errors)
    };
    // An empty attribute set is an absent one (protobuf bodies may carry an empty message).
    let given = |k: &str| {
        spec.get(k)
            .filter(|v| v.as_object().is_some_and(|m| !m.is_empty()))
    };
    let resource = given("resourceAttributes");
    let non_resource = given("nonResourceAttributes");
    if resource.is_some() == non_resource.is_some() {
        return Err(invalid(vec![strata_object::field::FieldError::new(
            strata_object::field::FieldErrorKind::Invalid,
            "spec.resourceAttributes",
            Some("null".into()),
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )]));
    }
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let subject = if kind == "SelfSubjectAccessReview" {
        user.clone()
    } else {
        let subject = UserInfo {
            name: text(&spec, "user"),
            uid: text(&spec, "uid"),
            groups: spec
                .get("groups")
                .and_then(Value::as_array)
                .map(|g| {
                    g.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
            ..Default::default()
        };
        if subject.name.is_empty() && subject.groups.is_empty() {
            return Err(invalid(vec![
                strata_object::field::FieldError::invalid_string(
                    "spec.user",
                    "",
                    "at least one of user or group must be specified",
                ),
            ]));
        }
        subject
    };
    let attrs = match (resource, non_resource) {
        (Some(r), _) => {
            let ns = text(r, "namespace");
            if kind == "LocalSubjectAccessReview" && ns != namespace {
                return Err(invalid(vec![
                    strata_object::field::FieldError::invalid_string(
                        "spec.resourceAttributes.namespace",
                        &ns,
                        "must match metadata.namespace",
                    ),
                ]));
            }
            strata_auth::authz::Attributes {
                user: subject,
                verb: text(r, "verb"),
                namespace: ns,
                api_group: text(r, "group"),
                api_version: text(r, "version"),
                resource: text(r, "resource"),
                subresource: text(r, "subresource"),
                name: text(r, "name"),
                resource_request: true,
                path: String::new(),
            }
        }
        (None, Some(n)) => strata_auth::authz::Attributes {
            user: subject,
            verb: text(n, "verb"),
            path: text(n, "path"),
            resource_request: false,
            ..Default::default()
        },
        // Refused above: exactly one of the two is present.
        (None, None) => return Err(Status::bad_request("no attributes to review")),
    };
    let status = match fe.authorizer.authorize(&attrs) {
        strata_auth::authz::Decision::Allow => json!({"allowed": true}),
        strata_auth::authz::Decision::Deny(reason) if reason.is_empty() => {
            json!({"allowed": false})
        }
        strata_auth::authz::Decision::Deny(reason) => json!({"allowed": false, "reason": reason}),
    };
    review["kind"] = json!(kind);
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    if review.get("metadata").is_none_or(|m| !m.is_object()) {
        review["metadata"] = json!({});
    }
    review["metadata"]["creationTimestamp"] = Value::Null;
    review["status"] = status;
    Ok(respond::value(201, &review, &output, render))
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
