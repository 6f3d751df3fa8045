//! Reads: get, list and their resource-version rules (spec §4.11): "Any", "Not Older Than"
//! and "Most Recent" from the watch cache, "Exact" and continued pages from the store.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use strata_object::field::FieldError;
use strata_object::{Object, ResourceType, Status};
use strata_store::{RangeRequest, Revision, StoreError};
use strata_watch::{Decoder, WatchCache};

use crate::errors::{cache_error, cache_error_in, store_error, Op};
use crate::version::{to_resource_version, to_revision};
use crate::{
    cache, errors, unix_now, CachedObject, ContinueToken, RegisteredType, Registry, Selection,
    FUTURE_REVISION_WAIT,
};

/// Options of list and deletecollection.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub limit: usize,
    pub continue_token: String,
    pub resource_version: String,
    pub resource_version_match: String,
    pub label_selector: String,
    pub field_selector: String,
}

/// One page of a collection.
#[derive(Clone, Debug)]
pub struct ObjectList {
    pub items: Vec<Arc<CachedObject>>,
    pub resource_version: String,
    pub continue_token: String,
    pub remaining_item_count: Option<u64>,
}

pub(crate) fn validate_list_options(opts: &ListOptions) -> Result<(), Status> {
    let invalid = |e: FieldError| Status::invalid("meta.k8s.io", "ListOptions", "", &[e]);
    match opts.resource_version_match.as_str() {
        "" => {}
        "Exact" | "NotOlderThan" => {
            if !opts.continue_token.is_empty() {
                return Err(invalid(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                )));
            }
            if opts.resource_version.is_empty() {
                return Err(invalid(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                )));
            }
            if opts.resource_version_match == "Exact" && opts.resource_version == "0" {
                return Err(invalid(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                )));
            }
        }
        other => {
            return Err(invalid(FieldError::not_supported(
                "resourceVersionMatch",
                other,
                &["Exact", "NotOlderThan", ""],
            )))
        }
    }
    if !opts.continue_token.is_empty()
        && !opts.resource_version.is_empty()
        && opts.resource_version != "0"
    {
        return Err(Status::bad_request(
            "specifying resource version is not allowed when using continue",
        ));
    }
    Ok(())
}

/// Where a store-served page starts.
pub(crate) struct StorePage<'a> {
    prefix: &'a str,
    start: String,
    revision: Option<Revision>,
    /// When the list's first page was served.
    issued: u64,
}

/// A list page as the kind's list object (`ServiceAccountList` …) in compact JSON, with items
/// that carry no type fields as Kubernetes' typed lists do, made a chunk at a time so that a
/// large list is never held whole: each chunk copies the next items from their cached
/// encodings.
pub struct JsonListChunks {
    /// The list's fields before its first item, until the first chunk takes them.
    head: Vec<u8>,
    items: std::vec::IntoIter<Arc<CachedObject>>,
    first: bool,
    done: bool,
    /// The bytes not yet returned.
    remaining: usize,
}

impl JsonListChunks {
    /// The chunks of `list` rendered as `info`'s list kind.
    pub fn new(info: &ResourceType, list: ObjectList) -> JsonListChunks {
        let mut meta = Map::new();
        meta.insert(
            "resourceVersion".into(),
            Value::String(list.resource_version.clone()),
        );
        if !list.continue_token.is_empty() {
            meta.insert(
                "continue".into(),
                Value::String(list.continue_token.clone()),
            );
        }
        if let Some(n) = list.remaining_item_count {
            meta.insert("remainingItemCount".into(), json!(n));
        }
        let mut head = Vec::with_capacity(256);
        cache::write_type_fields(&mut head, &info.list_kind, &info.api_version());
        head.extend_from_slice(b",\"metadata\":");
        serde_json::to_writer(&mut head, &meta).unwrap_or_default();
        head.extend_from_slice(b",\"items\":[");
        // Each item is its cached JSON less `kind` and `apiVersion`, and a comma between two.
        let items: usize = list.items.iter().map(|i| i.json_item_len()).sum();
        let commas = list.items.len().saturating_sub(1);
        let remaining = head.len() + items + commas + LIST_END.len();
        JsonListChunks {
            head,
            items: list.items.into_iter(),
            first: true,
            done: false,
            remaining,
        }
    }

    /// The number of bytes still to come.
    pub fn len(&self) -> usize {
        self.remaining
    }

    /// Whether every byte has been returned.
    pub fn is_empty(&self) -> bool {
        self.done
    }

    /// The next chunk: at least `size` bytes (an item is never split) unless the list ends
    /// first, `None` after the last.
    pub fn next_chunk(&mut self, size: usize) -> Option<Vec<u8>> {
        if self.done {
            return None;
        }
        let mut out = std::mem::take(&mut self.head);
        out.reserve(
            chunk_capacity(size)
                .min(self.remaining)
                .saturating_sub(out.len()),
        );
        while out.len() < size {
            match self.items.next() {
                Some(item) => {
                    if !self.first {
                        out.push(b',');
                    }
                    self.first = false;
                    item.write_json_item(&mut out);
                }
                None => {
                    out.extend_from_slice(LIST_END);
                    self.done = true;
                    break;
                }
            }
        }
        self.remaining = self.remaining.saturating_sub(out.len());
        Some(out)
    }
}

/// What a chunk of about `size` bytes reserves: room for the item that crosses `size` too, so
/// that it does not move the chunk.
pub fn chunk_capacity(size: usize) -> usize {
    size + size / 4
}

/// What closes a JSON list.
const LIST_END: &[u8] = b"]}\n";

/// The items of a list page as object trees.
pub fn list_objects(list: &ObjectList) -> Result<Vec<Object>, Status> {
    list.items.iter().map(|c| cache::to_object(c)).collect()
}

/// How long a consistent read waits for the watch cache when the store cannot prove the
/// cache current (no safe progress notifications): writes under the cache's own prefix
/// arrive well within it; otherwise the read goes to the store.
const UNPROVEN_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Where a consistent read is served from (see [`Registry::freshness`]).
pub(crate) enum Fresh {
    /// The watch cache, which has reached this revision.
    Cache(Revision),
    /// The store, at this revision.
    Store(Revision),
}

impl Registry {
    /// Reads one object: `resource_version` "" reads the latest (consistently), "0" whatever
    /// the cache holds, another value a state not older than it. Served by the watch cache.
    pub async fn get_cached(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> Result<Arc<CachedObject>, Status> {
        let key = rt.info.key(namespace, name);
        if resource_version.is_empty() {
            // A read of the latest may be one of a read-modify-write: it waits its turn when
            // the object's writers keep conflicting (see `read_turns`).
            self.read_turns.take(&key).await;
        }
        let min = match resource_version {
            "0" => Revision::ZERO,
            "" => match self.freshness(rt).await? {
                Fresh::Cache(min) => min,
                Fresh::Store(at) => return self.get_from_store(rt, &key, name, at).await,
            },
            rv => to_revision(rv)?.unwrap_or(Revision::ZERO),
        };
        rt.cache
            .wait_for(min, FUTURE_REVISION_WAIT)
            .await
            .map_err(|e| cache_error_in(Op::Get, rt, e))?;
        match rt.cache.get(&key).0 {
            Some(obj) => Ok(obj),
            None => match rt.cache.corrupt(&key) {
                Some(e) => Err(store_error(Op::Get, rt, name, errors::undecodable(&key, e))),
                None => Err(Status::not_found(&rt.info.group, &rt.info.resource, name)),
            },
        }
    }

    /// [`Registry::get_cached`] as an object tree.
    pub async fn get(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> Result<Object, Status> {
        let c = self
            .get_cached(rt, namespace, name, resource_version)
            .await?;
        cache::to_object(&c)
    }

    /// The revision a consistent read must reflect.
    pub(crate) async fn consistent_revision(
        &self,
        rt: &RegisteredType,
    ) -> Result<Revision, Status> {
        self.store
            .consistent_revision()
            .await
            .map_err(|e| store_error(Op::List, rt, "", e))
    }

    /// Where a consistent read is served from: the watch cache once it has reached the
    /// store's consistent revision, or the store at that revision when the cache cannot show
    /// it has (etcd before 3.4.31 with a prefix idle while other keys moved the revision, or a
    /// cache that did not catch up in time; kube-apiserver falls back to etcd alike).
    pub(crate) async fn freshness(&self, rt: &RegisteredType) -> Result<Fresh, Status> {
        let min = self.consistent_revision(rt).await?;
        Ok(if self.cache_reaches(&rt.cache, min).await {
            Fresh::Cache(min)
        } else {
            Fresh::Store(min)
        })
    }

    /// Whether `cache` reaches `min` in time: up to [`FUTURE_REVISION_WAIT`] when the store can
    /// make its feed show progress, [`UNPROVEN_WAIT`] when it cannot (the revision may come
    /// from keys no cache follows). `false` sends the caller to the store.
    pub async fn cache_reaches(&self, cache: &WatchCache, min: Revision) -> bool {
        if cache.revision() >= min {
            return true;
        }
        let wait = if self.store.request_progress() {
            FUTURE_REVISION_WAIT
        } else {
            UNPROVEN_WAIT
        };
        cache.wait_for(min, wait).await.is_ok()
    }

    /// One object read from the store at `at` (a consistent read the cache could not serve).
    async fn get_from_store(
        &self,
        rt: &RegisteredType,
        key: &str,
        name: &str,
        at: Revision,
    ) -> Result<Arc<CachedObject>, Status> {
        let (kv, _) = self
            .store
            .get(key, Some(at))
            .await
            .map_err(|e| store_error(Op::Get, rt, name, e))?;
        let kv = kv.ok_or_else(|| Status::not_found(&rt.info.group, &rt.info.resource, name))?;
        rt.decoder
            .decode(&kv.key, &kv.value, kv.mod_revision)
            .map(Arc::new)
            .map_err(|e| store_error(Op::Get, rt, name, errors::undecodable(&kv.key, e)))
    }

    /// Waits until the store reaches `min`, or answers 504 "too large resource version".
    pub(crate) async fn wait_for_revision(&self, min: Revision) -> Result<(), Status> {
        if self.store.current_revision() >= min {
            return Ok(());
        }
        let mut rx = self.store.subscribe();
        let reached = tokio::time::timeout(FUTURE_REVISION_WAIT, async {
            while *rx.borrow_and_update() < min {
                if rx.changed().await.is_err() {
                    return false;
                }
            }
            true
        })
        .await
        .unwrap_or(false);
        if reached {
            Ok(())
        } else {
            Err(Status::too_large_resource_version(
                min.get(),
                self.store.current_revision().get(),
                1,
            )
            .with_retry_after(1))
        }
    }

    /// Lists a collection (one namespace, or all when `namespace` is empty), honouring the
    /// selectors, `limit`, `continue` and the resource-version rules of spec §4.11. "Any",
    /// "Not Older Than" and "Most Recent" are served by the watch cache; "Exact" and the later
    /// pages of a chunked list read the store at the snapshot's revision.
    pub async fn list(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        opts: &ListOptions,
    ) -> Result<ObjectList, Status> {
        validate_list_options(opts)?;
        let selection = Selection::parse(&rt.info, &opts.label_selector, &opts.field_selector)?;
        let prefix = rt.info.collection_prefix(namespace);
        if !opts.continue_token.is_empty() {
            let token = ContinueToken::decode(&opts.continue_token, self.token_key(), &prefix)?;
            let start = format!("{prefix}{}", token.start);
            let age = unix_now().saturating_sub(token.issued);
            if token.revision >= 0 && age > self.config.continue_token_lifetime.as_secs() {
                return Err(self.continue_expired(&token, &prefix));
            }
            let rev = (token.revision >= 0).then_some(Revision(token.revision as u64));
            if let Some(rev) = rev {
                // While nothing at all changed since the first page, the cache still holds the
                // snapshot: it serves the page without a walk of the store.
                let known = (token.total > 0).then(|| token.total.saturating_sub(token.passed));
                let filter = selection.filter();
                let page = rt.cache.list(&prefix, &start, opts.limit, &filter, known);
                if page.revision == rev {
                    return Ok(self.cached_page(page, &prefix, &selection, &token));
                }
            }
            let page = StorePage {
                prefix: &prefix,
                start,
                revision: rev,
                issued: token.issued,
            };
            return match self.list_from_store(rt, page, opts.limit, &selection).await {
                Err(StoreError::Compacted { .. }) => Err(self.continue_expired(&token, &prefix)),
                other => other.map_err(|e| store_error(Op::List, rt, "", e)),
            };
        }
        let requested = to_revision(&opts.resource_version)?;
        let rv = opts.resource_version.as_str();
        let exact = match opts.resource_version_match.as_str() {
            "Exact" => true,
            "NotOlderThan" => false,
            _ => !rv.is_empty() && rv != "0" && opts.limit > 0,
        };
        if exact {
            let rev = requested.unwrap_or(Revision::ZERO);
            self.wait_for_revision(rev).await?;
            let page = StorePage {
                prefix: &prefix,
                start: String::new(),
                revision: Some(rev),
                issued: unix_now(),
            };
            return self
                .list_from_store(rt, page, opts.limit, &selection)
                .await
                .map_err(|e| store_error(Op::List, rt, "", e));
        }
        let min = match rv {
            "" => match self.freshness(rt).await? {
                Fresh::Cache(min) => min,
                Fresh::Store(at) => {
                    let page = StorePage {
                        prefix: &prefix,
                        start: String::new(),
                        revision: Some(at),
                        issued: unix_now(),
                    };
                    return self
                        .list_from_store(rt, page, opts.limit, &selection)
                        .await
                        .map_err(|e| store_error(Op::List, rt, "", e));
                }
            },
            "0" => Revision::ZERO,
            _ => requested.unwrap_or(Revision::ZERO),
        };
        rt.cache
            .wait_for(min, FUTURE_REVISION_WAIT)
            .await
            .map_err(|e| cache_error(rt, e))?;
        let corrupt = rt.cache.corrupt_under(&prefix);
        if !corrupt.is_empty() {
            return Err(errors::undecodable_list(rt, &corrupt));
        }
        let page = rt
            .cache
            .list(&prefix, "", opts.limit, &selection.filter(), None);
        let first = ContinueToken {
            revision: page.revision.get() as i64,
            start: String::new(),
            issued: unix_now(),
            passed: 0,
            total: 0,
        };
        Ok(self.cached_page(page, &prefix, &selection, &first))
    }

    /// A page the cache served, with the continue token of the rest. `prev` is the token the
    /// page continued (or a blank one for a first page): its issue time carries over, and the
    /// keys passed so far add up so later pages need not count what follows them.
    pub(crate) fn cached_page(
        &self,
        page: strata_watch::CachedList,
        prefix: &str,
        selection: &Selection,
        prev: &ContinueToken,
    ) -> ObjectList {
        let (continue_token, remaining_item_count) = match &page.next_key {
            Some(next) => {
                let passed = prev.passed + page.scanned;
                let token = ContinueToken {
                    revision: page.revision.get() as i64,
                    start: next[prefix.len()..].to_string(),
                    issued: prev.issued,
                    passed,
                    total: passed + page.remaining,
                };
                let count = selection.is_empty().then_some(page.remaining);
                (token.encode(self.token_key(), prefix), count)
            }
            None => (String::new(), None),
        };
        ObjectList {
            items: page.items,
            resource_version: to_resource_version(page.revision).to_string(),
            continue_token,
            remaining_item_count,
        }
    }

    /// 410 for a continue token past its lifetime or its snapshot, with a token that continues
    /// from the same key at the latest revision.
    pub(crate) fn continue_expired(&self, token: &ContinueToken, prefix: &str) -> Status {
        let mut s = Status::expired(
            "The provided continue parameter is too old to display a consistent list result. \
             You can start a new list without the continue parameter, or use the continue token \
             in this response to retrieve the remainder of the results. Continuing with the \
             provided token results in an inconsistent list - objects that were created, \
             modified, or deleted between the time the first chunk was returned and now may show \
             up in the list.",
        );
        s.metadata.continue_token = ContinueToken {
            revision: -1,
            start: token.start.clone(),
            issued: unix_now(),
            passed: 0,
            total: 0,
        }
        .encode(self.token_key(), prefix);
        s
    }

    /// Reads one page from the store at a revision (the latest when `None`).
    pub(crate) async fn list_from_store(
        &self,
        rt: &RegisteredType,
        page: StorePage<'_>,
        limit: usize,
        selection: &Selection,
    ) -> Result<ObjectList, StoreError> {
        let prefix = page.prefix;
        let mut items = Vec::new();
        let mut next_start = page.start;
        let mut read_rev = page.revision;
        let remaining;
        loop {
            let resp = self
                .store
                .range(RangeRequest {
                    prefix: prefix.to_string(),
                    start: next_start.clone(),
                    limit: if limit == 0 { 0 } else { limit - items.len() },
                    revision: read_rev,
                    skip_remaining: false,
                })
                .await?;
            read_rev = Some(resp.revision);
            let got = resp.kvs.len();
            if let Some(last) = resp.kvs.last() {
                next_start = format!("{}\0", last.key);
            }
            for kv in &resp.kvs {
                let obj = rt
                    .decoder
                    .decode(&kv.key, &kv.value, kv.mod_revision)
                    .map_err(|e| errors::undecodable(&kv.key, e))?;
                if selection.matches(&obj) {
                    items.push(Arc::new(obj));
                }
            }
            // Filtered pages may come up short; keep reading while the page is not full and
            // the store has more.
            if limit == 0 || resp.remaining == 0 || items.len() >= limit || got == 0 {
                remaining = resp.remaining;
                break;
            }
        }
        let revision = read_rev.unwrap_or(Revision::ZERO);
        let (continue_token, remaining_item_count) = if limit > 0 && remaining > 0 {
            let token = ContinueToken {
                revision: revision.get() as i64,
                start: next_start[prefix.len()..].to_string(),
                issued: page.issued,
                passed: 0,
                total: 0,
            };
            (
                token.encode(self.token_key(), prefix),
                selection.is_empty().then_some(remaining),
            )
        } else {
            (String::new(), None)
        };
        Ok(ObjectList {
            items,
            resource_version: to_resource_version(revision).to_string(),
            continue_token,
            remaining_item_count,
        })
    }
}
