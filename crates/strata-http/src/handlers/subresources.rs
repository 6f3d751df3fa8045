//! Sub-resources of objects: `status` and `finalize` (the object itself, of which only a part
//! may change), a ServiceAccount's `token`, and a custom resource's `scale`.

use http::{Method, Request, Response};
use hyper::body::Incoming;
use strata_object::resource::SubResource;
use strata_object::resource::SubResourceBehaviour;
use strata_object::{Status, Verb};
use strata_registry::custom::ScaleChange;
use strata_registry::RegisteredType;

use super::body::object_body;
use super::body::{body_bytes, decode_strict};
use super::header_str;
use super::options::patch_kind;
use super::options::{dry_run, write_options};
use super::render::{answers_json, object_response, written_response};
use super::verbs::patch_object;
use crate::negotiate::Offer;
use crate::query::Query;
use crate::request::RequestInfo;
use crate::respond::{self, Body, Render};
use crate::table::IncludeObject;
use crate::Frontend;

pub(crate) async fn subresource(
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
    let method = req.method().clone();
    let allowed = |verb: Verb| sub.verbs.contains(&verb);
    // Reading a part of an object is reading the object.
    if sub.behaviour == SubResourceBehaviour::Part && method == Method::GET && allowed(Verb::Get) {
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
    if sub.behaviour == SubResourceBehaviour::TokenRequest
        && method == Method::POST
        && allowed(Verb::Create)
    {
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
    if sub.behaviour == SubResourceBehaviour::Scale {
        return scale(fe, req, rt, info, accept, render, sub).await;
    }
    let writable = match method {
        Method::PUT => allowed(Verb::Update),
        Method::PATCH => allowed(Verb::Patch),
        _ => false,
    };
    if writable && sub.behaviour == SubResourceBehaviour::Part {
        // The object itself, of which the sub-resource may change only its part.
        let output = fe
            .config
            .formats
            .output(accept, Offer::for_type(&rt.info, false))?;
        let query = Query::parse(req.uri().query());
        let put = method == Method::PUT;
        let options_kind = if put { "UpdateOptions" } else { "PatchOptions" };
        let mut opts = write_options(&query, req.headers(), options_kind)?;
        opts.subresource = sub.name.clone();
        opts.answer_json = answers_json(&output, render);
        let (ns, name) = (info.namespace.as_str(), info.name.as_str());
        let written = if put {
            let body = object_body(fe, req, &rt.info.gvk()).await?;
            fe.registry.update(rt, ns, name, body, &opts).await?
        } else {
            patch_object(fe, req, rt, ns, name, opts).await?
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
        &method.as_str().to_ascii_lowercase(),
    ))
}

/// A custom resource's `scale`: an autoscaling/v1 Scale read, replaced or patched.
async fn scale(
    fe: &Frontend,
    req: Request<Incoming>,
    rt: &RegisteredType,
    info: &RequestInfo,
    accept: &str,
    render: Render,
    sub: &SubResource,
) -> Result<Response<Body>, Status> {
    let method = req.method().clone();
    let output = fe.config.formats.output(accept, Offer::PLAIN)?;
    let (ns, name) = (info.namespace.as_str(), info.name.as_str());
    let verb = match method {
        Method::GET => Verb::Get,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        _ => Verb::Create,
    };
    if !sub.verbs.contains(&verb) {
        return Err(Status::method_not_allowed_for(
            &format!("{}/{}", rt.info.resource, sub.name),
            &method.as_str().to_ascii_lowercase(),
        ));
    }
    if verb == Verb::Get {
        let scale = fe.registry.get_scale(rt, ns, name).await?;
        return Ok(respond::value(200, &scale, &output, render));
    }
    let query = Query::parse(req.uri().query());
    let put = verb == Verb::Update;
    let options_kind = if put { "UpdateOptions" } else { "PatchOptions" };
    let opts = write_options(&query, req.headers(), options_kind)?;
    let change = if put {
        ScaleChange::Replace(object_body(fe, req, &sub.kind).await?)
    } else {
        let (kind, format) = patch_kind(
            fe.config.formats,
            header_str(req.headers(), http::header::CONTENT_TYPE),
        )?;
        opts.check_patch(kind)?;
        let bytes = body_bytes(fe, req).await?;
        let body = decode_strict(format, &bytes, &sub.kind).map_err(|mut s| {
            s.message = format!("error decoding patch: {}", s.message);
            s
        })?;
        ScaleChange::Patch(kind, body)
    };
    let (scale, warnings) = fe.registry.write_scale(rt, ns, name, change, &opts).await?;
    let mut resp = respond::value(200, &scale, &output, render);
    respond::add_warnings(&mut resp, &warnings);
    Ok(resp)
}
