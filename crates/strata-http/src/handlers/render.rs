//! Objects and lists in the negotiated representation: JSON from the cache's bytes, protobuf
//! assembled from per-object messages, Tables, YAML and CBOR.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use serde_json::{json, Map, Value};
use strata_object::{Object, Status};
use strata_registry::{cache, JsonListChunks, ObjectList, RegisteredType};

use crate::negotiate::Output;
use crate::respond::{self, Body, Framing, Render};
use crate::table::{self, IncludeObject};

/// A list page in the negotiated representation.
pub(crate) fn list_response(
    rt: &RegisteredType,
    list: ObjectList,
    output: &Output,
    include: IncludeObject,
    render: Render,
) -> Result<Response<Body>, Status> {
    Ok(match output {
        Output::Json => respond::chunked(
            200,
            JsonListChunks::new(&rt.info, list),
            "application/json",
            render.pretty,
        ),
        Output::Protobuf(name) => {
            // Assembled from each object's message, encoded once per object version.
            let (api_version, kind) = (rt.info.api_version(), &rt.info.kind);
            let items = list
                .items
                .iter()
                .map(|obj| protobuf_message_of(obj, &api_version, kind))
                .collect::<Result<Vec<Bytes>, Status>>()?;
            let (head, tail) = strata_codec::proto::list_parts(
                &rt.info.api_version(),
                &rt.info.list_kind,
                &list.resource_version,
                &list.continue_token,
                list.remaining_item_count,
                items.iter().map(|b| b.len()),
            );
            let pieces = respond::Pieces::new(head, items, Framing::ProtobufField, tail);
            respond::chunked(200, pieces, name, false)
        }
        Output::Yaml => {
            // Assembled from each object's YAML as a sequence element, made once per object
            // version: the bytes the encoder writes for the whole list.
            let items = list
                .items
                .iter()
                .map(|obj| {
                    cached_item(
                        obj,
                        "yaml-item",
                        strata_codec::yaml::encode_sequence_element,
                    )
                })
                .collect::<Result<Vec<Bytes>, Status>>()?;
            let (head, tail) = strata_codec::yaml::list_parts(&list_fields(rt, &list), items.len());
            let pieces = respond::Pieces::new(head, items, Framing::Bare, tail);
            respond::chunked(200, pieces, "application/yaml", false)
        }
        Output::Cbor => {
            // As YAML: each object's CBOR item is made once per object version.
            let items = list
                .items
                .iter()
                .map(|obj| cached_item(obj, "cbor-item", strata_codec::cbor::encode_item))
                .collect::<Result<Vec<Bytes>, Status>>()?;
            let (head, tail) = strata_codec::cbor::list_parts(&list_fields(rt, &list), items.len());
            let pieces = respond::Pieces::new(head, items, Framing::Bare, tail);
            respond::chunked(200, pieces, crate::negotiate::CBOR, false)
        }
        Output::Table(target) => {
            // Each row is kept on its object version with its ages left open, and finished
            // for this answer as its chunk is written: the bytes of the Table rendered
            // directly now.
            let (head, tail) = table::table_parts(list_metadata(&list), include, target);
            let rows = TableRows {
                name: table::template_name(include, target),
                objects: list.items.into_iter(),
                include,
                target: target.clone(),
                rows: table::Rows::at(time::OffsetDateTime::now_utc()),
            };
            let pieces = respond::Pieces::of(head, rows, tail);
            respond::chunked(200, pieces, "application/json", render.pretty)
        }
    })
}

/// The rows of a Table list, from templates kept on each object version (made for those that
/// have none) and finished as the chunks of the answer are written. A row is copied from its
/// template straight into its chunk, so a list takes no share of each template.
struct TableRows {
    /// The name the templates are kept under.
    name: String,
    objects: std::vec::IntoIter<Arc<strata_registry::CachedObject>>,
    include: IncludeObject,
    target: table::TableTarget,
    rows: table::Rows,
}

impl respond::Items for TableRows {
    fn write_next(&mut self, out: &mut Vec<u8>) -> Result<bool, String> {
        let Some(obj) = self.objects.next() else {
            return Ok(false);
        };
        let rows = &mut self.rows;
        if obj
            .with_kept(&self.name, |template| rows.write(template, out))
            .is_some()
        {
            return Ok(true);
        }
        let (include, target) = (self.include, &self.target);
        let template = obj.encoded(&self.name, |c| match cache::to_object(c) {
            Ok(o) => Bytes::from(table::row_template(&o, include, target)),
            // Never a valid template: the caller says why.
            Err(_) => Bytes::new(),
        });
        if template.is_empty() {
            return Err(cache::to_object(&obj).err().map_or_else(
                || format!("cannot render {} as a Table row", obj.key()),
                |status| status.message,
            ));
        }
        rows.write(&template, out);
        Ok(true)
    }

    fn is_done(&self) -> bool {
        self.objects.len() == 0
    }

    fn remaining(&self) -> Option<usize> {
        None
    }
}

/// A list's `metadata`, as the JSON list writer writes it.
fn list_metadata(list: &ObjectList) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("resourceVersion".into(), json!(list.resource_version));
    if !list.continue_token.is_empty() {
        meta.insert("continue".into(), json!(list.continue_token));
    }
    if let Some(n) = list.remaining_item_count {
        meta.insert("remainingItemCount".into(), json!(n));
    }
    meta
}

/// A list's members in the JSON list's order, `items` (empty: a placeholder for the items
/// the codecs' list writers put in its place) last.
fn list_fields(rt: &RegisteredType, list: &ObjectList) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("kind".into(), json!(rt.info.list_kind));
    fields.insert("apiVersion".into(), json!(rt.info.api_version()));
    fields.insert("metadata".into(), Value::Object(list_metadata(list)));
    fields.insert("items".into(), Value::Array(Vec::new()));
    fields
}

/// A cached object as a list item (its JSON without `kind` and `apiVersion`) in one
/// encoding, kept under `name` on the object version, so every later list of that version
/// copies it. An object whose JSON does not parse (nothing the cache holds) is logged once
/// and answered 500.
pub(crate) fn cached_item(
    obj: &Arc<strata_registry::CachedObject>,
    name: &str,
    encode: fn(&Value) -> Vec<u8>,
) -> Result<Bytes, Status> {
    // No encoding of an item is empty, so empty marks a failure.
    let bytes = obj.encoded(name, |c| {
        match strata_codec::json::from_slice(&c.json_item()) {
            Ok(v) => Bytes::from(encode(&v)),
            Err(e) => {
                tracing::error!(key = c.key(), %e, "cannot decode a cached object");
                Bytes::new()
            }
        }
    });
    if bytes.is_empty() {
        return Err(Status::internal(format!(
            "object {} cannot be encoded as {name}",
            obj.key()
        )));
    }
    Ok(bytes)
}

/// The enveloped protobuf of a cached object, made once per object version.
pub(crate) fn protobuf_of(obj: &Arc<strata_registry::CachedObject>) -> Result<Bytes, Status> {
    cached_protobuf(obj, "protobuf", strata_codec::proto::encode)
}

/// The protobuf message (no envelope) of a cached object of `kind`, made once per object
/// version: the items of protobuf lists.
pub(crate) fn protobuf_message_of(
    obj: &Arc<strata_registry::CachedObject>,
    api_version: &str,
    kind: &str,
) -> Result<Bytes, Status> {
    cached_protobuf(obj, "protobuf-message", |v| {
        strata_codec::proto::encode_message(api_version, kind, v)
    })
}

/// One protobuf encoding of a cached object, kept under `name` on the object version. An
/// object that cannot be encoded (no valid encoding is empty) is logged once and answered 500.
pub(crate) fn cached_protobuf<E: std::fmt::Display>(
    obj: &Arc<strata_registry::CachedObject>,
    name: &str,
    encode: impl FnOnce(&Value) -> Result<Vec<u8>, E>,
) -> Result<Bytes, Status> {
    let bytes = obj.encoded(name, |c| {
        let encoded = strata_codec::json::from_slice(c.json())
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

/// An object's cached JSON (as the watch cache holds it) as a compact JSON answer.
pub(crate) fn cached_json(code: u16, json: &[u8]) -> Response<Body> {
    let mut body = Vec::with_capacity(json.len() + 1);
    body.extend_from_slice(json);
    body.push(b'\n');
    respond::bytes(code, body, "application/json")
}

/// Whether [`written_response`] answers with the write's JSON when it has one (and needs
/// nothing of its object then but the metadata): see `WriteOptions::answer_json`.
pub(crate) fn answers_json(output: &Output, render: Render) -> bool {
    *output == Output::Json && !render.pretty
}

/// A write's response: the object, with one `Warning` header per field-validation warning.
pub(crate) fn written_response(
    code: u16,
    written: strata_registry::Written,
    output: &Output,
    include: IncludeObject,
    render: Render,
) -> Response<Body> {
    let mut resp = match written.json {
        // The JSON the write made for the watch cache, which a GET of this version answers.
        Some(json) if answers_json(output, render) => cached_json(code, &json),
        _ => object_response(code, written.object, output, include, render),
    };
    respond::add_warnings(&mut resp, &written.warnings);
    resp
}

/// Renders one object in the negotiated representation.
pub(crate) fn object_response(
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
