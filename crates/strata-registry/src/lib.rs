//! Resource-type-agnostic REST semantics over the [`Store`] trait: create, get, list, update,
//! patch, delete and deletecollection, with optimistic concurrency, `generateName`, system
//! fields, validation and dry run.
//!
//! Resource types arrive as data ([`RegisteredType`]); kind-specific behaviour is a
//! [`Strategy`]. Storage errors become `Status` in [`errors`], once. This crate knows nothing of
//! HTTP: the frontend hands it decoded values and options, and renders what it returns.

pub mod cache;
mod continue_token;
mod delete;
pub mod errors;
mod selection;
pub mod strategy;
mod token;
mod validation;
pub mod version;
mod watch;
mod write;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{json, Map, Value};
use strata_object::field::FieldError;
use strata_object::{now_rfc3339, Object, ResourceType, Status};
use strata_store::{KeyValue, RangeRequest, Revision, Store, StoreError};
use strata_watch::{CacheConfig, Caches, Decoder, WatchCache};

pub use continue_token::ContinueToken;
pub use delete::{DeleteOptions, Deleted, Preconditions};
pub use selection::Selection;
pub use strata_watch::{CacheError, CacheMetrics, CachedObject, EventType, WatchItem};
pub use strategy::{
    ConfigMapStrategy, DefaultStrategy, NamespaceStrategy, RbacStrategy, ServiceAccountStrategy,
    Strategy,
};
pub use token::TokenIssuer;
pub use watch::{bookmark_object, StreamItem, WatchOptions, WatchStream};
pub use write::{default_manager, validate_manager, Body, FieldValidation, PatchKind, Written};

use crate::cache::JsonDecoder;
use crate::errors::{cache_error, store_error};
use crate::version::{to_resource_version, to_revision};

/// A resource type with the strategy that gives it its kind-specific behaviour and the watch
/// cache that serves its reads.
pub struct RegisteredType {
    pub info: ResourceType,
    pub strategy: Arc<dyn Strategy>,
    pub cache: Arc<WatchCache>,
    decoder: Arc<JsonDecoder>,
}

impl std::fmt::Debug for RegisteredType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredType")
            .field("resource", &self.info.resource)
            .finish()
    }
}

/// A last check of an object about to be stored (the new object, and the stored one on an
/// update): what the frontend knows and the registry does not, such as who is writing.
pub type Admit = Arc<dyn Fn(&Object, Option<&Object>) -> Result<(), Status> + Send + Sync>;

/// Options of create, update and patch.
#[derive(Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: run every stage but store nothing.
    pub dry_run: bool,
    /// The manager recorded in managedFields: `fieldManager`, or the frontend's default from the
    /// User-Agent. Required for apply.
    pub field_manager: String,
    pub field_validation: FieldValidation,
    /// Apply only: take ownership of conflicting fields.
    pub force: bool,
    /// The sub-resource written through (`status`, `finalize`), or empty for the object.
    pub subresource: String,
    /// Runs after validation, before anything is stored (dry runs included).
    pub admit: Option<Admit>,
}

impl std::fmt::Debug for WriteOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteOptions")
            .field("dry_run", &self.dry_run)
            .field("field_manager", &self.field_manager)
            .field("field_validation", &self.field_validation)
            .field("force", &self.force)
            .field("subresource", &self.subresource)
            .field("admit", &self.admit.is_some())
            .finish()
    }
}

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

/// How long a read at a resource version the store has not reached waits before 504.
pub(crate) const FUTURE_REVISION_WAIT: Duration = Duration::from_secs(3);
/// How often a create with `generateName` retries on a name collision.
const GENERATE_NAME_ATTEMPTS: usize = 8;

/// Settings of the registry and its caches.
#[derive(Clone, Debug)]
pub struct RegistryConfig {
    pub cache: CacheConfig,
    /// How long a continue token stays valid.
    pub continue_token_lifetime: Duration,
    /// The WatchList feature: `sendInitialEvents` on watches.
    pub watch_list: bool,
    /// The issuer (`iss`) of ServiceAccount tokens, and their default audience.
    pub service_account_issuer: String,
    /// The `AllowUnsafeMalformedObjectDeletion` gate: DELETE may force out an object whose
    /// stored value cannot be decoded.
    pub unsafe_malformed_object_deletion: bool,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            cache: CacheConfig::default(),
            continue_token_lifetime: Duration::from_secs(300),
            watch_list: true,
            service_account_issuer: "https://kubernetes.default.svc.cluster.local".into(),
            unsafe_malformed_object_deletion: false,
        }
    }
}

/// The store key of the cluster's continue-token checksum key.
const TOKEN_KEY: &str = "/strata/continue-token-key";

/// The REST semantics of every registered type over one store.
pub struct Registry {
    store: Arc<dyn Store>,
    /// The served types: replaced whole when one comes or goes, so a reader clones the `Arc`
    /// and holds no lock while it serves.
    types: std::sync::RwLock<Arc<Vec<Arc<RegisteredType>>>>,
    /// Counts changes of `types`, so that what is derived from them (OpenAPI) is rebuilt.
    generation: std::sync::atomic::AtomicU64,
    caches: Arc<Caches>,
    config: RegistryConfig,
    token_key: OnceLock<Vec<u8>>,
    issuer: OnceLock<TokenIssuer>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("types", &self.types)
            .finish()
    }
}

impl Registry {
    pub fn new(store: Arc<dyn Store>, config: RegistryConfig) -> Self {
        Self {
            caches: Arc::new(Caches::new(store.clone(), config.cache.clone())),
            store,
            types: Default::default(),
            generation: Default::default(),
            config,
            token_key: OnceLock::new(),
            issuer: OnceLock::new(),
        }
    }

    /// The built-in types (`strata_object::builtin::all()`) with their strategies.
    pub fn with_builtin_types(store: Arc<dyn Store>, config: RegistryConfig) -> Self {
        let r = Self::new(store, config);
        for info in strata_object::builtin::all() {
            let strategy = strategy::builtin(&info);
            r.register(info, strategy);
        }
        r
    }

    /// The cache name of a type: `<resource>` or `<resource>.<group>`.
    fn cache_name(info: &ResourceType) -> String {
        if info.group.is_empty() {
            info.resource.clone()
        } else {
            format!("{}.{}", info.resource, info.group)
        }
    }

    /// Adds a resource type before [`Registry::start`] (the built-in ones). Registering is all
    /// it takes for routing, discovery and OpenAPI to serve it. Types that come while serving
    /// use [`Registry::add_type`].
    pub fn register(&self, info: ResourceType, strategy: Arc<dyn Strategy>) {
        let decoder = Arc::new(JsonDecoder::new(&info));
        let cache = self.caches.add(
            &Self::cache_name(&info),
            &info.key_prefix(),
            decoder.clone(),
        );
        self.publish(RegisteredType {
            info,
            strategy,
            cache,
            decoder,
        });
    }

    /// Adds a resource type while serving: its watch cache is loaded at the revision the
    /// others are at, then routing, discovery and OpenAPI serve it. 409 when the group,
    /// version and resource are taken.
    pub async fn add_type(
        &self,
        info: ResourceType,
        strategy: Arc<dyn Strategy>,
    ) -> Result<(), Status> {
        if self
            .lookup(&info.group, &info.version, &info.resource)
            .is_some()
        {
            return Err(Status::already_exists(
                &info.group,
                &info.resource,
                &info.resource,
            ));
        }
        let decoder = Arc::new(JsonDecoder::new(&info));
        let cache = self
            .caches
            .add_running(
                &Self::cache_name(&info),
                &info.key_prefix(),
                decoder.clone(),
            )
            .await
            .map_err(|e| Status::service_unavailable(format!("loading the watch cache: {e}")))?;
        self.publish(RegisteredType {
            info,
            strategy,
            cache,
            decoder,
        });
        Ok(())
    }

    /// Stops serving a type: it leaves routing, discovery and OpenAPI, its watches end and its
    /// cache is dropped. Requests already running finish against the type they found. Its
    /// stored objects stay (removing them is the caller's decision). False when not served.
    pub fn remove_type(&self, group: &str, version: &str, resource: &str) -> bool {
        let mut types = self.types.write().unwrap_or_else(|e| e.into_inner());
        let Some(gone) = types
            .iter()
            .find(|t| {
                t.info.group == group && t.info.version == version && t.info.resource == resource
            })
            .cloned()
        else {
            return false;
        };
        let kept = types
            .iter()
            .filter(|t| !Arc::ptr_eq(t, &gone))
            .cloned()
            .collect();
        *types = Arc::new(kept);
        drop(types);
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.caches.remove(&gone.cache);
        true
    }

    fn publish(&self, rt: RegisteredType) {
        let mut types = self.types.write().unwrap_or_else(|e| e.into_inner());
        let mut next = Vec::clone(&types);
        next.push(Arc::new(rt));
        *types = Arc::new(next);
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Changes whenever a type comes or goes.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Loads the watch caches and the cluster's token key; serve requests only after this.
    pub async fn start(&self) -> Result<(), Status> {
        let key = self.load_secret(TOKEN_KEY).await?;
        let _ = self.token_key.set(key);
        let signing = self.load_secret(token::SIGNING_KEY).await?;
        let issuer =
            TokenIssuer::new(&signing, &self.config.service_account_issuer).ok_or_else(|| {
                Status::internal(format!(
                    "the key under {} is not a P-256 private key",
                    token::SIGNING_KEY
                ))
            })?;
        let _ = self.issuer.set(issuer);
        self.caches
            .start()
            .await
            .map_err(|e| Status::service_unavailable(format!("loading the watch cache: {e}")))
    }

    /// Reads the continue-token key, creating it on first start (every replica reads the same).
    /// Reads the 32-byte secret stored under `name`, creating it on first start. Replicas race
    /// to create it; the loser reads the winner's.
    async fn load_secret(&self, name: &str) -> Result<Vec<u8>, Status> {
        let unavailable = |e: StoreError| Status::service_unavailable(format!("{name}: {e}"));
        loop {
            if let (Some(kv), _) = self.store.get(name, None).await.map_err(unavailable)? {
                return Ok(kv.value.to_vec());
            }
            let key: [u8; 32] = rand::random();
            match self.store.create(name, Bytes::copy_from_slice(&key)).await {
                Ok(_) => return Ok(key.to_vec()),
                Err(StoreError::Exists(_)) => continue,
                Err(e) => return Err(unavailable(e)),
            }
        }
    }

    fn token_key(&self) -> &[u8] {
        self.token_key.get().map(Vec::as_slice).unwrap_or(b"")
    }

    /// The signer of ServiceAccount tokens (after [`Registry::start`]).
    pub fn token_issuer(&self) -> Option<&TokenIssuer> {
        self.issuer.get()
    }

    /// The `token` sub-resource: a TokenRequest for ServiceAccount `name`, answered with a
    /// signed token. Nothing is stored; `dryRun` changes nothing either.
    pub async fn create_token(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        request: Value,
    ) -> Result<Value, Status> {
        let issuer = self
            .issuer
            .get()
            .ok_or_else(|| Status::service_unavailable("the token signer is not loaded yet"))?;
        let sa = self.get(rt, namespace, name, "").await?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        issuer.issue(&sa, request, now)
    }

    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    /// Counters of every watch cache.
    pub fn cache_metrics(&self) -> Vec<CacheMetrics> {
        self.caches.all().iter().map(|c| c.metrics()).collect()
    }

    /// The types served now (a snapshot: later additions and removals do not change it).
    pub fn types(&self) -> Arc<Vec<Arc<RegisteredType>>> {
        self.types.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Finds a type by group, version and plural resource name.
    pub fn lookup(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Option<Arc<RegisteredType>> {
        self.types()
            .iter()
            .find(|t| {
                t.info.group == group && t.info.version == version && t.info.resource == resource
            })
            .cloned()
    }

    fn namespaces(&self) -> Option<Arc<RegisteredType>> {
        self.lookup("", "v1", "namespaces")
    }

    // ----- reads -----

    /// Reads one object: `resource_version` "" reads the latest (consistently), "0" whatever
    /// the cache holds, another value a state not older than it. Served by the watch cache.
    pub async fn get_cached(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        resource_version: &str,
    ) -> Result<Arc<CachedObject>, Status> {
        let min = match resource_version {
            "0" => Revision::ZERO,
            "" => self.consistent_revision(rt).await?,
            rv => to_revision(rv)?.unwrap_or(Revision::ZERO),
        };
        rt.cache
            .wait_for(min, FUTURE_REVISION_WAIT)
            .await
            .map_err(|e| cache_error(rt, e))?;
        let key = rt.info.key(namespace, name);
        match rt.cache.get(&key).0 {
            Some(obj) => Ok(obj),
            None => match rt.cache.corrupt(&key) {
                Some(e) => Err(store_error(rt, name, errors::undecodable(&key, e))),
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
    async fn consistent_revision(&self, rt: &RegisteredType) -> Result<Revision, Status> {
        self.store
            .consistent_revision()
            .await
            .map_err(|e| store_error(rt, "", e))
    }

    /// Waits until the store reaches `min`, or answers 504 "too large resource version".
    async fn wait_for_revision(&self, min: Revision) -> Result<(), Status> {
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
                other => other.map_err(|e| store_error(rt, "", e)),
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
            return match self.list_from_store(rt, page, opts.limit, &selection).await {
                Err(StoreError::Compacted { .. }) => Err(Status::expired(
                    "The resourceVersion for the provided list is too old.",
                )),
                other => other.map_err(|e| store_error(rt, "", e)),
            };
        }
        let min = match rv {
            "" => self.consistent_revision(rt).await?,
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
    fn cached_page(
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
    fn continue_expired(&self, token: &ContinueToken, prefix: &str) -> Status {
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
    async fn list_from_store(
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

    // ----- writes -----

    /// Creates an object from a decoded request body.
    pub async fn create(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        body: impl Into<Body>,
        opts: &WriteOptions,
    ) -> Result<Written, Status> {
        let (obj, warnings) = self.checked_body(rt, body.into(), opts)?;
        let object = self.create_object(rt, namespace, obj, opts, true).await?;
        Ok(Written {
            object,
            warnings,
            created: true,
        })
    }

    /// Creates `obj`, already decoded and field-checked. `track` records the write in
    /// managedFields as an Update (an apply that creates has recorded itself already).
    async fn create_object(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        mut obj: Object,
        opts: &WriteOptions,
        track: bool,
    ) -> Result<Object, Status> {
        if rt.info.namespaced() {
            match obj.namespace() {
                "" => obj.set_namespace(namespace),
                ns if ns != namespace => {
                    return Err(Status::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ))
                }
                _ => {}
            }
        } else {
            obj.set_namespace("");
        }
        if !obj.resource_version().is_empty() {
            return Err(Status::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let generate = obj.name().is_empty() && !obj.generate_name().is_empty();
        if generate {
            let base = obj.generate_name().to_string();
            obj.set_name(&generated_name(&base));
        }
        // System fields: the server's, whatever the client sent.
        obj.set_uid(&uuid::Uuid::new_v4().to_string());
        obj.set_creation_timestamp(&now_rfc3339());
        for field in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "generation",
        ] {
            obj.set_meta_value(field, None);
        }
        // Ownership is recorded for what the client sent, before the kind's own changes.
        if track {
            obj = write::track_update(&rt.info, None, obj, opts)?;
        }
        rt.strategy.prepare_for_create(&mut obj);
        obj.drop_empty_metadata();
        let mut errors = validation::validate_object_meta(&rt.info, &obj);
        errors.extend(rt.strategy.validate(&obj));
        if !errors.is_empty() {
            return Err(Status::invalid(
                &rt.info.group,
                &rt.info.kind,
                obj.name(),
                &errors,
            ));
        }
        if rt.info.namespaced() {
            self.check_namespace_open(rt, namespace, obj.name()).await?;
        }
        if let Some(admit) = &opts.admit {
            admit(&obj, None)?;
        }
        if opts.dry_run {
            // A dry run stores nothing but still reports the conflict a real create would meet.
            let key = rt.info.key(obj.namespace(), obj.name());
            let (existing, _) = self
                .store
                .get(&key, None)
                .await
                .map_err(|e| store_error(rt, obj.name(), e))?;
            if existing.is_some() {
                return Err(self.already_exists(rt, &obj).await);
            }
            return Ok(obj);
        }
        let mut attempts = 0;
        loop {
            let key = rt.info.key(obj.namespace(), obj.name());
            match self.store.create(&key, encode_stored(&obj)).await {
                Ok(kv) => {
                    obj.set_resource_version(&to_resource_version(kv.mod_revision).to_string());
                    return Ok(obj);
                }
                Err(StoreError::Exists(_)) if generate && attempts + 1 < GENERATE_NAME_ATTEMPTS => {
                    attempts += 1;
                    let base = obj.generate_name().to_string();
                    obj.set_name(&generated_name(&base));
                }
                Err(StoreError::Exists(_)) => {
                    let mut s = self.already_exists(rt, &obj).await;
                    if generate {
                        s.message.push_str(
                            ", the server was not able to generate a unique name for the object",
                        );
                        s = s.with_retry_after(1);
                    }
                    return Err(s);
                }
                Err(e) => return Err(store_error(rt, obj.name(), e)),
            }
        }
    }

    async fn already_exists(&self, rt: &RegisteredType, obj: &Object) -> Status {
        let mut s = Status::already_exists(&rt.info.group, &rt.info.resource, obj.name());
        let key = rt.info.key(obj.namespace(), obj.name());
        if let Ok((Some(kv), _)) = self.store.get(&key, None).await {
            if decode_stored(rt, &kv).is_ok_and(|o| !o.deletion_timestamp().is_empty()) {
                s.message = format!("object is being deleted: {}", s.message);
            }
        }
        s
    }

    /// New objects may go only into a namespace that exists (404) and is not being terminated
    /// (403, as Kubernetes' namespace lifecycle admission answers).
    async fn check_namespace_open(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
    ) -> Result<(), Status> {
        let Some(ns) = self.namespaces() else {
            return Ok(());
        };
        let key = ns.info.key("", namespace);
        // The cache answers, once it has caught up with every write this replica has seen (a
        // namespace deleted a moment ago must already refuse content). A miss asks the store.
        let seen = self.store.current_revision();
        ns.cache
            .wait_for(seen, FUTURE_REVISION_WAIT)
            .await
            .map_err(|e| cache_error(&ns, e))?;
        let terminating = match ns.cache.get(&key).0 {
            Some(c) => c.field("status.phase") == Some("Terminating"),
            None => match self.store.get(&key, None).await {
                Ok((Some(kv), _)) => decode_stored(&ns, &kv)?
                    .as_map()
                    .get("status")
                    .and_then(|s| s.get("phase"))
                    .is_some_and(|p| p == "Terminating"),
                Ok((None, _)) => return Err(Status::not_found("", "namespaces", namespace)),
                Err(e) => return Err(store_error(&ns, namespace, e)),
            },
        };
        if !terminating {
            return Ok(());
        }
        let mut s = Status::forbidden(
            &rt.info.group,
            &rt.info.resource,
            name,
            &format!(
                "unable to create new content in namespace {namespace} because it is being terminated"
            ),
        );
        if let Some(d) = s.details.as_mut() {
            d.causes.push(strata_object::StatusCause {
                reason: "NamespaceTerminating".into(),
                message: format!("namespace {namespace} is being terminated"),
                field: "metadata.namespace".into(),
            });
        }
        Err(s)
    }

    /// A POST or PUT body after field validation, decoded, with its warnings.
    fn checked_body(
        &self,
        rt: &RegisteredType,
        body: Body,
        opts: &WriteOptions,
    ) -> Result<(Object, Vec<String>), Status> {
        let Body {
            mut value,
            duplicates,
        } = body;
        let warnings = write::check_fields(
            &rt.info,
            &mut value,
            &duplicates,
            opts.field_validation,
            write::Stage::Body,
        )?;
        Ok((self.decode_body(rt, value)?, warnings))
    }

    /// Checks the type fields of a body against the endpoint and fills them in when absent.
    fn decode_body(&self, rt: &RegisteredType, body: Value) -> Result<Object, Status> {
        let info = &rt.info;
        write::read_object(info, body).map_err(|e| match e {
            write::NotThisType::Version(why) => Status::bad_request(why),
            write::NotThisType::Malformed(why) | write::NotThisType::Kind(why) => {
                write::undecodable(info, &why)
            }
        })
    }

    /// Replaces an object (PUT). Returns the stored object.
    pub async fn update(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        body: impl Into<Body>,
        opts: &WriteOptions,
    ) -> Result<Written, Status> {
        let (mut obj, warnings) = self.checked_body(rt, body.into(), opts)?;
        if obj.name() != name {
            return Err(Status::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                obj.name()
            )));
        }
        if rt.info.namespaced() {
            match obj.namespace() {
                "" => obj.set_namespace(namespace),
                ns if ns != namespace => {
                    return Err(Status::bad_request(format!(
                        "the namespace of the object ({ns}) does not match the namespace on the request ({namespace})"
                    )))
                }
                _ => {}
            }
        } else {
            obj.set_namespace("");
        }
        let object = self
            .guaranteed_update(rt, namespace, name, opts, None, |_| Ok(obj.clone()))
            .await?;
        Ok(Written {
            object,
            warnings,
            created: false,
        })
    }

    /// Patches an object with a JSON, merge or strategic patch, or applies a configuration
    /// (server-side apply, which creates the object when it is absent).
    pub async fn patch(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        kind: PatchKind,
        patch: impl Into<Body>,
        opts: &WriteOptions,
    ) -> Result<Written, Status> {
        let patch = patch.into();
        if kind == PatchKind::Strategic && !rt.info.supports_strategic_merge {
            return Err(Status::unsupported_media_type(&[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ]));
        }
        if kind == PatchKind::Apply {
            return self.apply(rt, namespace, name, patch, opts).await;
        }
        if kind != PatchKind::Json && !patch.value.is_object() {
            return Err(Status::bad_request(
                "error decoding patch: the patch must be a JSON object",
            ));
        }
        let mut warnings = Vec::new();
        let object = self
            .guaranteed_update(rt, namespace, name, opts, None, |current| {
                let mut doc = write::apply_patch(
                    &rt.info,
                    kind,
                    &current.clone().into_value(),
                    &patch.value,
                )?;
                let found = write::check_fields(
                    &rt.info,
                    &mut doc,
                    &patch.duplicates,
                    opts.field_validation,
                    write::Stage::Patch,
                )?;
                warnings = found;
                self.decode_patched(rt, doc)
            })
            .await?;
        Ok(Written {
            object,
            warnings,
            created: false,
        })
    }

    /// Server-side apply: merges the applied configuration into the object, or creates it.
    async fn apply(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        patch: Body,
        opts: &WriteOptions,
    ) -> Result<Written, Status> {
        let Body {
            mut value,
            duplicates,
        } = patch;
        let warnings = write::check_fields(
            &rt.info,
            &mut value,
            &duplicates,
            opts.field_validation,
            write::Stage::Apply,
        )?;
        let applied = write::applied_config(&rt.info, value, namespace, name)?;
        loop {
            let updated = self
                .guaranteed_update(rt, namespace, name, opts, Some(&applied), |current| {
                    Ok(current.clone())
                })
                .await;
            match updated {
                Ok(object) => {
                    return Ok(Written {
                        object,
                        warnings,
                        created: false,
                    })
                }
                Err(s) if s.is_not_found() => {}
                Err(s) => return Err(s),
            }
            let obj = write::apply_to(&rt.info, None, &applied, opts)?;
            let obj = self.decode_body(rt, obj)?;
            match self.create_object(rt, namespace, obj, opts, false).await {
                Ok(object) => {
                    return Ok(Written {
                        object,
                        warnings,
                        created: true,
                    })
                }
                // Created by someone else meanwhile: apply to theirs.
                Err(s) if s.is_already_exists() => continue,
                Err(s) => return Err(s),
            }
        }
    }

    /// Decodes the result of a patch; one that no longer fits the type is 422 on `patch`.
    fn decode_patched(&self, rt: &RegisteredType, doc: Value) -> Result<Object, Status> {
        let copy = doc.clone();
        write::read_object(&rt.info, doc).map_err(|e| write::invalid_patch(&copy, e.why()))
    }

    /// The read-modify-write loop of every update: reads the current object, builds the new one
    /// with `mutate`, and swaps it in if nothing changed meanwhile. A conflict retries unless
    /// the client named the `resourceVersion` it expects (`precondition`).
    ///
    /// The new object's `resourceVersion`, when set (by a PUT body, a patch, or an applied
    /// configuration), is a precondition: it must be the current one, or 409.
    async fn guaranteed_update(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        opts: &WriteOptions,
        applied: Option<&Value>,
        mut mutate: impl FnMut(&Object) -> Result<Object, Status>,
    ) -> Result<Object, Status> {
        let info = &rt.info;
        let key = info.key(namespace, name);
        loop {
            let (kv, current) = self.read_current(rt, &key, name).await?;
            let mut obj = match applied {
                Some(config) => {
                    let merged = write::apply_to(info, Some(&current), config, opts)?;
                    self.decode_patched(rt, merged)?
                }
                None => mutate(&current)?,
            };
            let precondition = match applied {
                Some(config) => config
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
                None => obj.resource_version(),
            };
            if !precondition.is_empty() && precondition != current.resource_version() {
                to_revision(precondition)?;
                return Err(Status::stale_conflict(&info.group, &info.resource, name));
            }
            let mut errors = validation::validate_object_meta_update(info, &mut obj, &current);
            if applied.is_none() {
                obj = write::track_update(info, Some(&current), obj, opts)?;
            }
            if opts.subresource.is_empty() {
                rt.strategy.prepare_for_update(&mut obj, &current);
            } else {
                rt.strategy
                    .prepare_for_subresource_update(&opts.subresource, &mut obj, &current);
            }
            obj.drop_empty_metadata();
            if errors.is_empty() {
                errors.extend(validation::validate_object_meta(info, &obj));
                errors.extend(rt.strategy.validate(&obj));
                errors.extend(rt.strategy.validate_update(&obj, &current));
            }
            if !errors.is_empty() {
                return Err(Status::invalid(&info.group, &info.kind, name, &errors));
            }
            if let Some(admit) = &opts.admit {
                admit(&obj, Some(&current))?;
            }
            obj.set_resource_version("");
            let bytes = encode_stored(&obj);
            let terminating = !obj.deletion_timestamp().is_empty();
            if terminating && obj.finalizers().is_empty() && !rt.strategy.holds_deletion(&obj) {
                // The last finalizer is gone: the update completes the deletion.
                if opts.dry_run {
                    obj.set_resource_version(current.resource_version());
                    return Ok(obj);
                }
                match self.store.delete(&key, Some(kv.mod_revision)).await {
                    Ok(_) => {
                        obj.set_resource_version(current.resource_version());
                        return Ok(obj);
                    }
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(e) => return Err(store_error(rt, name, e)),
                }
            }
            if bytes == kv.value || opts.dry_run {
                // Nothing changed (or nothing may be stored): no write, no new revision.
                obj.set_resource_version(current.resource_version());
                return Ok(if bytes == kv.value { current } else { obj });
            }
            match self.store.update(&key, bytes, kv.mod_revision).await {
                Ok(new_kv) => {
                    obj.set_resource_version(&to_resource_version(new_kv.mod_revision).to_string());
                    return Ok(obj);
                }
                // Retried: a precondition then fails against the newer object, as it should.
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(store_error(rt, name, e)),
            }
        }
    }

    /// Reads the latest stored state of one object, or 404.
    async fn read_current(
        &self,
        rt: &RegisteredType,
        key: &str,
        name: &str,
    ) -> Result<(KeyValue, Object), Status> {
        let (kv, _) = self
            .store
            .get(key, None)
            .await
            .map_err(|e| store_error(rt, name, e))?;
        let Some(kv) = kv else {
            return Err(Status::not_found(&rt.info.group, &rt.info.resource, name));
        };
        let current = decode_stored(rt, &kv)?;
        Ok((kv, current))
    }
}

fn validate_list_options(opts: &ListOptions) -> Result<(), Status> {
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
struct StorePage<'a> {
    prefix: &'a str,
    start: String,
    revision: Option<Revision>,
    /// When the list's first page was served.
    issued: u64,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn generated_name(base: &str) -> String {
    strata_object::names::generate_name(base, rand::random::<u32>)
}

/// The stored form of an object: compact JSON without `resourceVersion` (the revision is the
/// version).
fn encode_stored(obj: &Object) -> Bytes {
    let mut v = obj.clone();
    v.set_resource_version("");
    Bytes::from(strata_codec::json::compact(&v.into_value()))
}

/// Reads a stored object back and stamps its resource version; a value that does not decode is
/// Kubernetes' "corrupt object" 500, naming the key.
fn decode_stored(rt: &RegisteredType, kv: &KeyValue) -> Result<Object, Status> {
    let name = kv.key.rsplit('/').next().unwrap_or("");
    let value: Value = serde_json::from_slice(&kv.value)
        .map_err(|e| store_error(rt, name, errors::undecodable(&kv.key, e)))?;
    let mut obj = Object::from_value(value)
        .map_err(|e| store_error(rt, name, errors::undecodable(&kv.key, e)))?;
    obj.set_resource_version(&to_resource_version(kv.mod_revision).to_string());
    Ok(obj)
}

/// Renders a list page as the kind's list object (`ServiceAccountList` …) in compact JSON; items
/// carry no type fields, as Kubernetes' typed lists do.
pub fn list_json(info: &ResourceType, list: &ObjectList) -> Vec<u8> {
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
    let size: usize = list.items.iter().map(|i| i.json().len()).sum();
    let mut out = Vec::with_capacity(size + 256);
    out.extend_from_slice(b"{\"kind\":");
    serde_json::to_writer(&mut out, &info.list_kind).unwrap_or_default();
    out.extend_from_slice(b",\"apiVersion\":");
    serde_json::to_writer(&mut out, &info.api_version()).unwrap_or_default();
    out.extend_from_slice(b",\"metadata\":");
    serde_json::to_writer(&mut out, &meta).unwrap_or_default();
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in list.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        item.write_json_item(&mut out);
    }
    out.extend_from_slice(b"]}\n");
    out
}

/// The items of a list page as object trees.
pub fn list_objects(list: &ObjectList) -> Result<Vec<Object>, Status> {
    list.items.iter().map(|c| cache::to_object(c)).collect()
}
