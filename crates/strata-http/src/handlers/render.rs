//! Objects and lists in the negotiated representation: JSON from the cache's bytes, protobuf
//! assembled from per-object messages, Tables, YAML and CBOR.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use serde_json::{json, Map, Value};
use strata_object::{Object, Status};
use strata_registry::{cache, JsonListChunks, ObjectList, RegisteredType};

use crate::negotiate::Output;
use crate::respond::{self, Body, Render};
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
            let pieces = respond::Pieces::of(head, respond::ProtobufItems::new(items), tail);
            respond::chunked(200, pieces, name, false)
        }
        Output::Yaml => {
            // Each object's YAML as a sequence element, made once per object version: the
            // bytes the encoder writes for the whole list.
            let (head, tail) =
                strata_codec::yaml::list_parts(&list_fields(rt, &list), list.items.len());
            let items = KeptItems::as_made(
                list.items,
                "yaml-item",
                strata_codec::yaml::encode_sequence_element,
            );
            respond::chunked(
                200,
                respond::Pieces::of(head, items, tail),
                "application/yaml",
                false,
            )
        }
        Output::Cbor => {
            // As YAML: each object's CBOR item is made once per object version.
            let (head, tail) =
                strata_codec::cbor::list_parts(&list_fields(rt, &list), list.items.len());
            let items =
                KeptItems::as_made(list.items, "cbor-item", strata_codec::cbor::encode_item);
            respond::chunked(
                200,
                respond::Pieces::of(head, items, tail),
                crate::negotiate::CBOR,
                false,
            )
        }
        Output::Table(target) => {
            // Each row is kept on its object version with its ages left open, and finished
            // for this answer as its chunk is written: the bytes of the Table rendered
            // directly now.
            let (head, tail) = table::table_parts(list_metadata(&list), include, target);
            let template_target = target.clone();
            let mut rows = table::Rows::at(time::OffsetDateTime::now_utc());
            let items = KeptItems {
                name: table::template_name(include, target),
                objects: list.items.into_iter(),
                make: Box::new(move |c| match cache::to_object(c) {
                    Ok(o) => Bytes::from(table::row_template(&o, include, &template_target)),
                    Err(e) => {
                        tracing::error!(key = c.key(), error = %e.message, "cannot make a Table row");
                        Bytes::new()
                    }
                }),
                write: move |template: &[u8], out: &mut Vec<u8>| rows.write(template, out),
            };
            let pieces = respond::Pieces::of(head, items, tail);
            respond::chunked(200, pieces, "application/json", render.pretty)
        }
    })
}

/// A list's items from the encoding kept on each object version under `name` (made by `make`
/// for a version that has none yet), written by `write` as the chunks of the answer are made.
/// An item is copied from the kept bytes straight into its chunk, so a list takes no share of
/// them. `make` answers empty bytes for an object it cannot encode (no valid item is empty).
struct KeptItems<W> {
    name: String,
    objects: std::vec::IntoIter<Arc<strata_registry::CachedObject>>,
    make: Box<dyn Fn(&strata_registry::CachedObject) -> Bytes + Send + Sync>,
    write: W,
}

impl KeptItems<fn(&[u8], &mut Vec<u8>)> {
    /// Items that are `encode` of each object's list-item JSON, written as they are kept.
    fn as_made(
        objects: Vec<Arc<strata_registry::CachedObject>>,
        name: &str,
        encode: fn(&Value) -> Vec<u8>,
    ) -> Self {
        KeptItems {
            name: name.to_string(),
            objects: objects.into_iter(),
            make: Box::new(move |c| item_encoding(c, encode)),
            write: |item, out| out.extend_from_slice(item),
        }
    }
}

impl<W> respond::Items for KeptItems<W>
where
    W: FnMut(&[u8], &mut Vec<u8>) + Send + Sync + 'static,
{
    fn write_next(&mut self, out: &mut Vec<u8>) -> Result<bool, String> {
        let Some(obj) = self.objects.next() else {
            return Ok(false);
        };
        let write = &mut self.write;
        if obj.with_kept(&self.name, |item| write(item, out)).is_some() {
            return Ok(true);
        }
        let item = obj.encoded(&self.name, |c| (self.make)(c));
        if item.is_empty() {
            return Err(format!(
                "object {} cannot be encoded as {}",
                obj.key(),
                self.name
            ));
        }
        (self.write)(&item, out);
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
/// encoding: empty, and logged, for an object whose JSON does not parse (nothing the cache
/// holds).
fn item_encoding(c: &strata_registry::CachedObject, encode: fn(&Value) -> Vec<u8>) -> Bytes {
    match strata_codec::json::from_slice(&c.json_item()) {
        Ok(v) => Bytes::from(encode(&v)),
        Err(e) => {
            tracing::error!(key = c.key(), %e, "cannot decode a cached object");
            Bytes::new()
        }
    }
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
