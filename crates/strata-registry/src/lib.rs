//! Resource-type-agnostic REST semantics over the [`Store`] trait: create, get, list, update,
//! patch, delete and deletecollection, with optimistic concurrency, `generateName`, system
//! fields, validation and dry run.
//!
//! Resource types arrive as data ([`RegisteredType`]); kind-specific behaviour is a
//! [`Strategy`]. Storage errors become `Status` in [`errors`], once. This crate knows nothing of
//! HTTP: the frontend hands it decoded values and options, and renders what it returns.
//!
//! This file holds the registry and its type set; `reads`, `writes` (with the stages in
//! `write`), `delete`, `watch`, `admission` and `secrets` each add one concern's methods.

mod admission;
pub mod cache;
mod continue_token;
pub mod crd;
pub mod custom;
mod delete;
pub mod encryption;
pub mod errors;
mod key_queue;
pub mod kinds;
mod read_turns;
mod reads;
mod secrets;
mod selection;
pub mod strategy;
mod token;
mod validation;
pub mod version;
mod watch;
mod write;
mod writes;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use strata_object::{Object, ResourceType, Status};
use strata_store::{KeyValue, Store};
use strata_watch::{CacheConfig, Caches, WatchCache};

pub use continue_token::ContinueToken;
pub use delete::{DeleteOptions, Deleted, Preconditions};
pub use reads::{chunk_capacity, list_objects, JsonListChunks, ListOptions, ObjectList};
pub use selection::Selection;
pub use strata_watch::{
    CacheError, CacheMetrics, CachedObject, EventType, KeptEncodings, WatchItem,
};
pub use strategy::{
    ConfigMapStrategy, DefaultStrategy, NamespaceStrategy, RbacStrategy, ServiceAccountStrategy,
    Strategy,
};
pub use token::TokenIssuer;
pub use watch::{bookmark_object, StreamItem, WatchOptions, WatchStream};
pub use write::{default_manager, validate_manager, Body, FieldValidation, PatchKind, Written};
pub use writes::{random_uuid, Admit, WriteOptions};

use crate::cache::JsonDecoder;
use crate::errors::{store_error, Op};
use crate::secrets::TOKEN_KEY;
use crate::version::to_resource_version;

/// A resource type with the strategy that gives it its kind-specific behaviour and the watch
/// cache that serves its reads.
pub struct RegisteredType {
    pub info: ResourceType,
    pub strategy: Arc<dyn Strategy>,
    pub cache: Arc<WatchCache>,
    decoder: Arc<JsonDecoder>,
    /// The revision of this replica's latest write of this type.
    written: std::sync::atomic::AtomicU64,
}

impl RegisteredType {
    /// The revision of the latest write of this type through this registry: a reader that
    /// must see this replica's own writes of the type waits for its cache to get there, not
    /// for every write the store has seen.
    pub fn written(&self) -> strata_store::Revision {
        strata_store::Revision(self.written.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Records a write of this type at `revision`.
    pub(crate) fn wrote(&self, revision: strata_store::Revision) {
        self.written
            .fetch_max(revision.get(), std::sync::atomic::Ordering::SeqCst);
    }
}

impl std::fmt::Debug for RegisteredType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredType")
            .field("resource", &self.info.resource)
            .finish()
    }
}

/// How long a read at a resource version the store has not reached waits before 504.
pub(crate) const FUTURE_REVISION_WAIT: Duration = Duration::from_secs(3);
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

/// The REST semantics of every registered type over one store.
pub struct Registry {
    store: Arc<dyn Store>,
    /// The served types: replaced whole when one comes or goes, so a reader clones the `Arc`
    /// and holds no lock while it serves.
    types: std::sync::RwLock<Arc<Vec<Arc<RegisteredType>>>>,
    /// Counts changes of `types`, so that what is derived from them (OpenAPI) is rebuilt.
    generation: std::sync::atomic::AtomicU64,
    /// Held by `add_type` from its check to its publication, so that two registrations of
    /// one type cannot both pass the check.
    registering: tokio::sync::Mutex<()>,
    caches: Arc<Caches>,
    config: RegistryConfig,
    token_key: OnceLock<Vec<u8>>,
    issuer: OnceLock<TokenIssuer>,
    /// Brings the types defined at run time up to the stored definitions (the CRD
    /// controller's, once it runs).
    types_catch_up: OnceLock<TypesCatchUp>,
    /// Turn-taking of concurrent updates of one object.
    key_queues: Arc<key_queue::KeyQueues>,
    /// Turn-taking of consistent reads of objects updated by read-modify-write.
    read_turns: read_turns::ReadTurns,
}

/// A catch-up of the types defined at run time with their stored definitions: after it, this
/// registry serves every type the store defines as of the moment it was called.
pub type TypesCatchUp =
    Arc<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync>;

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
            registering: Default::default(),
            config,
            token_key: OnceLock::new(),
            issuer: OnceLock::new(),
            types_catch_up: OnceLock::new(),
            key_queues: key_queue::KeyQueues::new(),
            read_turns: read_turns::ReadTurns::new(),
        }
    }

    /// Sets the catch-up of types defined at run time (once; later calls change nothing).
    pub fn set_types_catch_up(&self, catch_up: TypesCatchUp) {
        let _ = self.types_catch_up.set(catch_up);
    }

    /// Serves every type the store defines now, before answering a request that may name one
    /// this registry has not served yet (discovery, OpenAPI, an unknown resource path): so a
    /// type defined through one replica is served by every replica the moment it is defined,
    /// not when each replica's watch brings the definition.
    pub async fn catch_up_types(&self) {
        if let Some(catch_up) = self.types_catch_up.get() {
            catch_up().await;
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
        let decoder = Arc::new(JsonDecoder::new(&info, strategy.clone()));
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
            written: Default::default(),
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
        let _registering = self.registering.lock().await;
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
        let loaded = self.load(info, strategy).await?;
        self.publish(loaded);
        Ok(())
    }

    /// The registration of a type served from now on, its watch cache loaded at the revision
    /// the other caches are at.
    async fn load(
        &self,
        info: ResourceType,
        strategy: Arc<dyn Strategy>,
    ) -> Result<RegisteredType, Status> {
        let decoder = Arc::new(JsonDecoder::new(&info, strategy.clone()));
        let cache = self
            .caches
            .add_running(
                &Self::cache_name(&info),
                &info.key_prefix(),
                decoder.clone(),
            )
            .await
            .map_err(|e| Status::service_unavailable(format!("loading the watch cache: {e}")))?;
        Ok(RegisteredType {
            info,
            strategy,
            cache,
            decoder,
            written: Default::default(),
        })
    }

    /// Replaces the description of a served type (its columns, names, sub-resources, schema),
    /// keeping its watch cache, strategy and open watches. False when not served.
    pub fn update_type(&self, info: ResourceType) -> bool {
        let mut types = self.types.write().unwrap_or_else(|e| e.into_inner());
        let Some(i) = types.iter().position(|t| {
            t.info.group == info.group
                && t.info.version == info.version
                && t.info.resource == info.resource
        }) else {
            return false;
        };
        let old = &types[i];
        let next = Arc::new(RegisteredType {
            info,
            strategy: old.strategy.clone(),
            cache: old.cache.clone(),
            decoder: old.decoder.clone(),
            written: Default::default(),
        });
        next.wrote(old.written());
        let mut all = Vec::clone(&types);
        all[i] = next;
        *types = Arc::new(all);
        drop(types);
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        true
    }

    /// [`Registry::update_type`] for a change of how the type's stored objects read (a CRD's
    /// schema: the defaults and pruning applied on the way out of storage): the watch cache is
    /// loaded again from the store, so every object reads as the new description says, and
    /// the type's open watches end, as Kubernetes ends them when it rebuilds a custom
    /// resource's storage; clients watch again. False when not served.
    pub async fn reload_type(&self, info: ResourceType) -> Result<bool, Status> {
        let _registering = self.registering.lock().await;
        let Some(old) = self.lookup(&info.group, &info.version, &info.resource) else {
            return Ok(false);
        };
        let next = Arc::new(self.load(info, old.strategy.clone()).await?);
        next.wrote(old.written());
        {
            let mut types = self.types.write().unwrap_or_else(|e| e.into_inner());
            let mut all = Vec::clone(&types);
            match all.iter().position(|t| Arc::ptr_eq(t, &old)) {
                Some(i) => all[i] = next,
                // Withdrawn meanwhile (the registration lock keeps out only other additions).
                None => {
                    drop(types);
                    self.caches.remove(&next.cache);
                    return Ok(false);
                }
            }
            *types = Arc::new(all);
        }
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.caches.remove(&old.cache);
        Ok(true)
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

    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    /// Counters of every watch cache.
    pub fn cache_metrics(&self) -> Vec<CacheMetrics> {
        self.caches.all().iter().map(|c| c.metrics()).collect()
    }

    /// The budget of the encodings the caches keep beyond each object's JSON.
    pub fn kept_encodings(&self) -> &KeptEncodings {
        self.caches.kept_encodings()
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
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The stored form of an object: compact JSON without `resourceVersion` (the revision is the
/// version), in the form its type is stored in.
fn encode_stored(rt: &RegisteredType, obj: &Object) -> cache::Stored {
    cache::Stored::of(rt.strategy.to_storage(obj))
}

/// Reads a stored object back and stamps its resource version; a value that does not decode is
/// Kubernetes' "corrupt object" 500, naming the key.
fn decode_stored(rt: &RegisteredType, kv: &KeyValue) -> Result<Object, Status> {
    let name = kv.key.rsplit('/').next().unwrap_or("");
    if let Some(e) = encryption::transform_error(&kv.value) {
        return Err(store_error(
            Op::Get,
            rt,
            name,
            errors::undecodable(&kv.key, e),
        ));
    }
    let value: Value = strata_codec::json::from_slice(&kv.value)
        .map_err(|e| store_error(Op::Get, rt, name, errors::undecodable(&kv.key, e)))?;
    let mut obj = Object::from_value(value)
        .map_err(|e| store_error(Op::Get, rt, name, errors::undecodable(&kv.key, e)))?;
    rt.strategy.convert_from_storage(&mut obj);
    obj.set_resource_version(&to_resource_version(kv.mod_revision).to_string());
    Ok(obj)
}
