//! Watch responses: a chunked body of newline-delimited `{"type","object"}` JSON documents.
//!
//! Events that are ready together go out in one chunk, so a busy stream costs one write per
//! burst rather than one per event. Each object's encoding comes from the cache and is shared by
//! every watcher; only the few bytes of the event envelope are written per watcher.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body as HttpBody, Frame};
use strata_registry::{cache, StreamItem, WatchStream};

use strata_object::Status;

use crate::negotiate::Output;
use crate::respond::Body;
use crate::table::{self, IncludeObject};

/// Most bytes gathered into one chunk.
const CHUNK: usize = 64 * 1024;

/// The body of a watch response.
pub struct WatchBody {
    stream: WatchStream,
    output: Output,
    include: IncludeObject,
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// Completes when the server shuts down.
    closing: Pin<Box<dyn Future<Output = ()> + Send + Sync>>,
    /// Table watches send `columnDefinitions` in their first event only.
    columns_sent: bool,
    done: bool,
}

impl WatchBody {
    /// The response body streaming `stream`, ending at `timeout` or when `closing` turns true.
    pub fn body(
        stream: WatchStream,
        output: Output,
        include: IncludeObject,
        timeout: Duration,
        mut closing: tokio::sync::watch::Receiver<bool>,
    ) -> Body {
        WatchBody {
            stream,
            output,
            include,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            closing: Box::pin(async move {
                let _ = closing.wait_for(|c| *c).await;
            }),
            columns_sent: false,
            done: false,
        }
        .boxed()
    }

    /// Appends one event (a JSON line, or a length-prefixed protobuf frame); returns false when
    /// the item ends the stream.
    fn encode(&mut self, item: StreamItem, out: &mut BytesMut) -> bool {
        match self.output {
            Output::Protobuf(_) => return self.encode_protobuf(item, out),
            Output::Cbor => return encode_cbor(item, out),
            _ => {}
        }
        let (kind, object, last) = match item {
            StreamItem::Event(t, obj) => {
                let bytes = match &self.output {
                    // Watches are never negotiated to YAML (no stream form); protobuf is
                    // framed by `encode_protobuf`.
                    Output::Json | Output::Yaml | Output::Protobuf(_) | Output::Cbor => {
                        obj.json().clone()
                    }
                    Output::Table(target) => {
                        let columns = !self.columns_sent;
                        self.columns_sent = true;
                        let name = format!(
                            "table;g={};v={};include={};columns={columns}",
                            target.group,
                            target.version,
                            self.include.as_str()
                        );
                        let include = self.include;
                        // Empty (never a valid row) marks an object that cannot be read back.
                        let render = |c: &strata_registry::CachedObject| {
                            let Ok(o) = cache::to_object(c) else {
                                return Bytes::new();
                            };
                            let mut meta = serde_json::Map::new();
                            meta.insert("resourceVersion".into(), o.resource_version().into());
                            let t = table::table(&[o], meta, include, target, columns);
                            Bytes::from(strata_codec::json::compact(&t))
                        };
                        // A row with an age is rendered for each watcher: a kept one would
                        // show later watchers the age it had when first rendered.
                        if target.depends_on_time() {
                            render(&obj)
                        } else {
                            obj.encoded(&name, render)
                        }
                    }
                };
                if bytes.is_empty() {
                    let why = format!("cannot render {} as a Table row", obj.key());
                    return self.encode(StreamItem::Error(Box::new(Status::internal(why))), out);
                }
                (t.as_str(), bytes, false)
            }
            StreamItem::Bookmark(v) => (
                "BOOKMARK",
                Bytes::from(strata_codec::json::compact(&v)),
                false,
            ),
            StreamItem::Error(s) => (
                "ERROR",
                Bytes::from(strata_codec::json::compact(&s.to_value())),
                true,
            ),
        };
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"object\":");
        out.extend_from_slice(&object);
        out.extend_from_slice(b"}\n");
        !last
    }
}

/// Appends one event as a CBOR data item of an `application/cbor-seq` stream: the map
/// `{type, object}`, made once per object and event type and shared by every watcher.
fn encode_cbor(item: StreamItem, out: &mut BytesMut) -> bool {
    let event = |kind: &str, object: serde_json::Value| {
        strata_codec::cbor::encode(&serde_json::json!({"type": kind, "object": object}))
    };
    match item {
        StreamItem::Event(t, obj) => {
            let kind = t.as_str();
            let bytes = obj.encoded(&format!("cbor-event;{kind}"), |c| {
                let object: serde_json::Value =
                    strata_codec::json::from_slice(c.json()).unwrap_or_default();
                Bytes::from(event(kind, object))
            });
            out.extend_from_slice(&bytes);
            true
        }
        StreamItem::Bookmark(v) => {
            out.extend_from_slice(&event("BOOKMARK", v));
            true
        }
        StreamItem::Error(s) => {
            out.extend_from_slice(&event("ERROR", s.to_value()));
            false
        }
    }
}

impl WatchBody {
    /// A protobuf frame per item. An object or bookmark that cannot be encoded ends the
    /// stream with an ERROR event (500) rather than a frame with nothing in it.
    fn encode_protobuf(&mut self, item: StreamItem, out: &mut BytesMut) -> bool {
        let frame = |kind: &str, v: &serde_json::Value| {
            strata_codec::proto::encode(v)
                .map(|enveloped| strata_codec::proto::watch_frame(kind, &enveloped))
                .map_err(|e| Status::internal(format!("cannot encode a watch event: {e}")))
        };
        let written = match item {
            // The whole frame is made once per object version and event type, and shared.
            StreamItem::Event(t, obj) => crate::handlers::protobuf_of(&obj).map(|object| {
                obj.encoded(&format!("protobuf-watch;{}", t.as_str()), |_| {
                    Bytes::from(strata_codec::proto::watch_frame(t.as_str(), &object))
                })
            }),
            StreamItem::Bookmark(v) => frame("BOOKMARK", &v).map(Bytes::from),
            StreamItem::Error(s) => {
                return match frame("ERROR", &s.to_value()) {
                    Ok(bytes) => {
                        out.extend_from_slice(&bytes);
                        false
                    }
                    Err(e) => {
                        tracing::error!(%e, "cannot encode a watch error");
                        false
                    }
                };
            }
        };
        match written {
            Ok(bytes) => {
                out.extend_from_slice(&bytes);
                true
            }
            Err(status) => self.encode_protobuf(StreamItem::Error(Box::new(status)), out),
        }
    }
}

impl HttpBody for WatchBody {
    type Data = Bytes;
    type Error = crate::respond::BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if this.deadline.as_mut().poll(cx).is_ready() || this.closing.as_mut().poll(cx).is_ready() {
            // timeoutSeconds and shutdown end the stream cleanly, without an error event.
            this.done = true;
            return Poll::Ready(None);
        }
        let first = match this.stream.poll_next(cx) {
            Poll::Ready(Some(item)) => item,
            Poll::Ready(None) => {
                this.done = true;
                return Poll::Ready(None);
            }
            Poll::Pending => return Poll::Pending,
        };
        let mut out = BytesMut::with_capacity(1024);
        let mut more = this.encode(first, &mut out);
        while more && out.len() < CHUNK {
            match this.stream.try_next() {
                Some(item) => more = this.encode(item, &mut out),
                None => break,
            }
        }
        if !more {
            this.done = true;
        }
        Poll::Ready(Some(Ok(Frame::data(out.freeze()))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
