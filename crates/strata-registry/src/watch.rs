//! Watch: the start rules of spec §4.11 and §4.5 (initial state, streaming lists with their
//! closing bookmark, start after a version) over the type's watch cache.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::{json, Value};
use strata_object::field::FieldError;
use strata_object::{ResourceType, Status};
use strata_store::Revision;
use strata_watch::{StartAt, WatchItem, WatchReceiver, WatchSpec};

use crate::errors::cache_error;
use crate::selection::Selection;
use crate::version::{to_resource_version, to_revision};
use crate::{RegisteredType, Registry, FUTURE_REVISION_WAIT};

/// Options of a watch request.
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    pub resource_version: String,
    pub resource_version_match: String,
    pub send_initial_events: Option<bool>,
    pub allow_bookmarks: bool,
    pub label_selector: String,
    pub field_selector: String,
}

/// A started watch: items in order, ending when the client goes away, the watch is closed
/// (a [`WatchItem::Closed`] item), or the caller's deadline passes.
#[derive(Debug)]
pub struct WatchStream {
    pending: VecDeque<Item>,
    /// `None` when the stream is only its pending items.
    receiver: Option<WatchReceiver>,
    rt: Arc<RegisteredType>,
}

/// One thing to send: a cache item, or the bookmark closing a streaming list's initial events.
#[derive(Debug)]
enum Item {
    Cache(WatchItem),
    InitialEventsEnd(Revision),
}

/// What a watch stream yields.
#[derive(Debug)]
pub enum StreamItem {
    Event(strata_watch::EventType, Arc<strata_watch::CachedObject>),
    /// A bookmark object (kind, apiVersion and metadata with the resource version).
    Bookmark(Value),
    /// The error that ends the stream (boxed: it is at most one per stream).
    Error(Box<Status>),
}

impl WatchStream {
    fn convert(&self, item: Item) -> StreamItem {
        match item {
            Item::Cache(WatchItem::Event(t, o)) => StreamItem::Event(t, o),
            Item::Cache(WatchItem::Bookmark(r)) => StreamItem::Bookmark(bookmark_object(
                &self.rt.info,
                &to_resource_version(r).to_string(),
                false,
            )),
            Item::Cache(WatchItem::Closed(e)) => {
                StreamItem::Error(Box::new(cache_error(&self.rt, e)))
            }
            Item::InitialEventsEnd(r) => StreamItem::Bookmark(bookmark_object(
                &self.rt.info,
                &to_resource_version(r).to_string(),
                true,
            )),
        }
    }

    /// The next item; `None` when the stream is over.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<StreamItem>> {
        if let Some(item) = self.pending.pop_front() {
            return Poll::Ready(Some(self.convert(item)));
        }
        match self.receiver.as_mut() {
            Some(r) => r
                .poll_recv(cx)
                .map(|o| o.map(|i| self.convert(Item::Cache(i)))),
            None => Poll::Ready(None),
        }
    }

    /// An item if one is ready without waiting.
    pub fn try_next(&mut self) -> Option<StreamItem> {
        if let Some(item) = self.pending.pop_front() {
            return Some(self.convert(item));
        }
        let item = self.receiver.as_mut()?.try_recv()?;
        Some(self.convert(Item::Cache(item)))
    }

    pub async fn next(&mut self) -> Option<StreamItem> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }
}

/// The object of a BOOKMARK event: the watched kind with only `metadata.resourceVersion`, and on
/// the bookmark that closes a streaming list's initial events, the `k8s.io/initial-events-end`
/// annotation.
pub fn bookmark_object(info: &ResourceType, resource_version: &str, initial_end: bool) -> Value {
    let mut meta = json!({"resourceVersion": resource_version});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": meta})
}

/// The watch rules of ListOptions validation; every problem is reported.
fn validate(opts: &WatchOptions, watch_list: bool) -> Result<(), Status> {
    let m = opts.resource_version_match.as_str();
    let mut errors = Vec::new();
    if opts.send_initial_events.is_some() {
        if m != "NotOlderThan" {
            errors.push(FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !watch_list {
            errors.push(FieldError::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
            ));
        }
    }
    if !m.is_empty() {
        if opts.send_initial_events.is_none() {
            errors.push(FieldError::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        if m != "NotOlderThan" {
            errors.push(FieldError::not_supported(
                "resourceVersionMatch",
                m,
                &["NotOlderThan"],
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Status::invalid("meta.k8s.io", "ListOptions", "", &errors))
    }
}

impl Registry {
    /// The revision a watch "from the most recent state" starts at: the consistent revision
    /// when the watch cache has reached it, else what the cache has. A cache that cannot prove
    /// itself current (see [`Registry::freshness`]) has every change under its prefix up to
    /// its revision; anything later reaches the watch as events, in order.
    async fn watch_revision(&self, rt: &RegisteredType) -> Result<Revision, Status> {
        Ok(match self.freshness(rt).await? {
            crate::reads::Fresh::Cache(min) => min,
            crate::reads::Fresh::Store(_) => rt.cache.revision(),
        })
    }

    /// Starts a watch of one collection (one namespace, or all when `namespace` is empty).
    /// Errors found before the stream starts are returned; later ones end the stream as a
    /// [`StreamItem::Error`].
    pub async fn watch(
        &self,
        rt: Arc<RegisteredType>,
        namespace: &str,
        opts: &WatchOptions,
    ) -> Result<WatchStream, Status> {
        validate(opts, self.config.watch_list)?;
        let selection = Selection::parse(&rt.info, &opts.label_selector, &opts.field_selector)?;
        let rv = opts.resource_version.as_str();
        let requested = to_revision(rv)?;
        // Legacy watches that start with the state are, with WatchList, streaming lists too:
        // their bookmarks include the one closing the initial events.
        let streaming = match opts.send_initial_events {
            Some(v) => v,
            None => self.config.watch_list && (rv.is_empty() || rv == "0"),
        };
        let start = match (opts.send_initial_events, rv) {
            (Some(true), "") | (None, "") => StartAt::State {
                min: self.watch_revision(&rt).await?,
            },
            (Some(true), "0") | (None, "0") => StartAt::State {
                min: Revision::ZERO,
            },
            (Some(true), _) => StartAt::State {
                min: requested.unwrap_or(Revision::ZERO),
            },
            (Some(false), "") => StartAt::After(self.watch_revision(&rt).await?),
            (Some(false), "0") => StartAt::After(rt.cache.revision()),
            (_, _) => StartAt::After(requested.unwrap_or(Revision::ZERO)),
        };
        let spec = WatchSpec {
            prefix: rt.info.collection_prefix(namespace),
            filter: selection.filter(),
            start,
            bookmarks: opts.allow_bookmarks,
        };
        let mut pending = VecDeque::new();
        let watch = match rt.cache.watch(spec, FUTURE_REVISION_WAIT).await {
            Ok(w) => w,
            // A watch that cannot start from the version asked for is an ERROR event in an
            // otherwise successful stream, as Kubernetes' watch cache answers it.
            Err(e @ strata_watch::CacheError::Expired { .. }) => {
                return Ok(WatchStream {
                    pending: VecDeque::from([Item::Cache(WatchItem::Closed(e))]),
                    receiver: None,
                    rt,
                });
            }
            Err(e) => return Err(cache_error(&rt, e)),
        };
        let initial = matches!(start, StartAt::State { .. });
        pending.extend(watch.backlog.into_iter().map(Item::Cache));
        if initial && streaming && opts.allow_bookmarks {
            pending.push_back(Item::InitialEventsEnd(watch.revision));
        }
        Ok(WatchStream {
            pending,
            receiver: Some(watch.receiver),
            rt,
        })
    }
}
