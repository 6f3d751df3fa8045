//! Query and body options of resource requests, parsed as Kubernetes parses them: dry run,
//! field manager and validation, list and watch options, DeleteOptions, patch types.

use http::{header, HeaderMap, Request};
use hyper::body::Incoming;
use serde_json::Value;
use strata_object::{GroupVersionKind, Status};
use strata_registry::{DeleteOptions, ListOptions, PatchKind, WatchOptions, WriteOptions};

use super::body::{body_bytes, decode_body};
use super::header_str;
use crate::negotiate;
use crate::query::Query;
use crate::Frontend;

/// Parses `dryRun` values: absent or empty is an ordinary request, `All` a dry run.
pub(crate) fn dry_run(
    query: &Query,
    values: &[String],
    options_kind: &str,
) -> Result<bool, Status> {
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

pub(crate) fn write_options(
    query: &Query,
    headers: &HeaderMap,
    options_kind: &str,
) -> Result<WriteOptions, Status> {
    WriteOptions::from_request(
        options_kind,
        dry_run(query, &[], options_kind)?,
        query.get("fieldManager").unwrap_or(""),
        query.get("fieldValidation").unwrap_or(""),
        query.has("force") && query.bool("force"),
        header_str(headers, header::USER_AGENT),
    )
}

pub(crate) fn list_options(query: &Query) -> Result<ListOptions, Status> {
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
pub(crate) fn watch_options(query: &Query, name: &str) -> Result<WatchOptions, Status> {
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

/// How long a watch runs: `timeoutSeconds`, or like Kubernetes a random 30–60 minutes when it
/// is absent or 0. A negative value is accepted and, as in Kubernetes, ends the watch at once.
pub(crate) fn watch_timeout(query: &Query) -> Result<std::time::Duration, Status> {
    Ok(match query.int("timeoutSeconds")? {
        Some(s) if s > 0 => std::time::Duration::from_secs(s as u64),
        Some(s) if s < 0 => std::time::Duration::ZERO,
        _ => std::time::Duration::from_secs(rand::random_range(1800..3600)),
    })
}

/// The patch type and body format named by a PATCH request's `Content-Type`, or 415.
pub(crate) fn patch_kind(
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

pub(crate) const PATCH_TYPES: [&str; 5] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
    "application/apply-patch+cbor",
];

/// DeleteOptions from the body when there is one (any accepted encoding), else from the
/// query string, as Kubernetes reads them; `preconditions` have no query form.
pub(crate) async fn delete_options(
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
pub(crate) fn query_bool(query: &Query, key: &str) -> Result<Option<bool>, Status> {
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
