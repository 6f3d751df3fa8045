//! The verbs of a resource endpoint: get, list, watch, create, update, patch, delete and
//! deletecollection, each one call into the registry.

use std::sync::Arc;

use http::{header, Method, Request, Response};
use hyper::body::Incoming;
use strata_auth::UserInfo;
use strata_object::Status;
use strata_registry::{RegisteredType, WriteOptions};

use super::body::{body_bytes, decode_strict, object_body};
use super::header_str;
use super::options::{
    delete_options, list_options, patch_kind, watch_options, watch_timeout, write_options,
};
use super::render::{
    answers_json, cached_json, list_response, object_response, protobuf_of, written_response,
};
use super::subresources::subresource;
use crate::negotiate::{self, Offer, Output};
use crate::query::Query;
use crate::request::RequestInfo;
use crate::respond::{self, Body, Render};
use crate::table::IncludeObject;
use crate::Frontend;

pub(crate) async fn resource(
    fe: &Frontend,
    req: Request<Incoming>,
    info: RequestInfo,
    rt: Option<Arc<RegisteredType>>,
    query: Query,
    user: &UserInfo,
    render: Render,
) -> Result<Response<Body>, Status> {
    let rt = rt.ok_or_else(Status::path_not_found)?;
    let namespaced = rt.info.namespaced();
    // A namespaced object needs a namespace in its path; a cluster-scoped type never has one.
    if (!namespaced && !info.namespace.is_empty())
        || (namespaced && info.namespace.is_empty() && !info.name.is_empty())
    {
        return Err(Status::path_not_found());
    }
    if let Some(refused) = rt.strategy.unavailable() {
        return Err(refused);
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
                cached_json(200, obj.json())
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
            opts.admit = strata_auth::escalation::check(fe.rbac.as_ref(), &rt, user);
            opts.answer_json = answers_json(&output, render);
            let body = object_body(fe, req, &rt.info.gvk()).await?;
            let written = fe.registry.create(&rt, ns, body, &opts).await?;
            Ok(written_response(201, written, &output, include, render))
        }
        (Method::PUT, false) => {
            let output = fe.config.formats.output(&accept, plain)?;
            let mut opts = write_options(&query, req.headers(), "UpdateOptions")?;
            opts.admit = strata_auth::escalation::check(fe.rbac.as_ref(), &rt, user);
            opts.answer_json = answers_json(&output, render);
            let body = object_body(fe, req, &rt.info.gvk()).await?;
            let written = fe.registry.update(&rt, ns, name, body, &opts).await?;
            Ok(written_response(200, written, &output, include, render))
        }
        (Method::PATCH, false) => {
            let output = fe.config.formats.output(&accept, plain)?;
            let mut opts = write_options(&query, req.headers(), "PatchOptions")?;
            opts.admit = strata_auth::escalation::check(fe.rbac.as_ref(), &rt, user);
            opts.answer_json = answers_json(&output, render);
            let written = patch_object(fe, req, &rt, ns, name, opts).await?;
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
                Some(obj) if deleted.answers_status(&rt.info) => {
                    let mut status = Status::success(Some(strata_object::StatusDetails {
                        name: obj.name().to_string(),
                        group: rt.info.group.clone(),
                        kind: rt.info.resource.clone(),
                        uid: obj.uid().to_string(),
                        ..Default::default()
                    }));
                    status.code = code;
                    respond::value(code, &status.to_value(), &output, render)
                }
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
pub(crate) async fn patch_object(
    fe: &Frontend,
    req: Request<Incoming>,
    rt: &RegisteredType,
    ns: &str,
    name: &str,
    opts: WriteOptions,
) -> Result<strata_registry::Written, Status> {
    let (kind, format) = patch_kind(
        fe.config.formats,
        header_str(req.headers(), header::CONTENT_TYPE),
    )?;
    // The options are refused before the body is read, as Kubernetes orders it.
    opts.check_patch(kind)?;
    let bytes = body_bytes(fe, req).await?;
    let body = decode_strict(format, &bytes, &rt.info.gvk()).map_err(|mut s| {
        s.message = format!("error decoding patch: {}", s.message);
        s
    })?;
    fe.registry.patch(rt, ns, name, kind, body, &opts).await
}

/// The check forced deletion needs beyond `delete`: the verb
/// `unsafe-delete-ignore-read-errors` on the same object, never through a sub-resource.
pub(crate) fn authorize_unsafe_delete(
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
