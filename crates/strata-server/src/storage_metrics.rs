//! Storage latency for `/metrics`: a `Store` wrapper that times each request to the engine and
//! observes it in kube-apiserver's `etcd_request_duration_seconds{operation,type}` (the name
//! is kept on every engine, so dashboards built for kube-apiserver read Strata's), with `type`
//! the resource of the key, as `configmaps` or `leases.coordination.k8s.io`.
//!
//! `strata-store` knows nothing of Prometheus: the wrapper lives in the composition root.
//!
//! The embedded engine's group commit is read from its counters at each scrape
//! ([`RocksCollector`]): how long its write batches take (the WAL fsync, mostly) and how many
//! writes they carry, what etcd's `etcd_disk_wal_fsync_duration_seconds` tells of etcd.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::MetricType;
use strata_http::metrics::sharded::Histogram;
use strata_store::{Changes, KeyValue, RangeRequest, RangeResponse, Result, Revision, Store};

/// The operations timed, named as kube-apiserver's etcd3 store names them.
const OPERATIONS: [&str; 5] = ["get", "list", "create", "update", "delete"];
const GET: usize = 0;
const LIST: usize = 1;
const CREATE: usize = 2;
const UPDATE: usize = 3;
const DELETE: usize = 4;

type Labels = [(&'static str, String); 2];

/// The latency histograms, by operation and type.
#[derive(Clone, Debug)]
pub struct StorageMetrics {
    family: Family<Labels, Histogram, fn() -> Histogram>,
    /// The histograms of each type (by the key's resource segment(s)).
    by_type: Arc<RwLock<HashMap<String, Arc<TypeSeries>>>>,
}

/// One type's histograms, one per operation, made on its first use.
#[derive(Debug)]
struct TypeSeries {
    label: String,
    operations: [OnceLock<Histogram>; 5],
}

fn histogram() -> Histogram {
    Histogram::new(strata_http::metrics::LATENCY_BUCKETS)
}

impl StorageMetrics {
    /// The histograms, registered with `metrics`.
    pub fn new(metrics: &strata_http::Metrics) -> Self {
        let family: Family<Labels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(histogram);
        metrics.register(|r| {
            r.register(
                "etcd_request_duration_seconds",
                "Time the storage engine took to answer a request in seconds, by operation and \
                 resource type",
                family.clone(),
            )
        });
        Self {
            family,
            by_type: Arc::default(),
        }
    }

    fn observe(&self, op: usize, key: &str, started: Instant) {
        let elapsed = started.elapsed().as_secs_f64();
        let segment = type_segment(key);
        // The usual case reads under the shared lock without taking a reference (an Arc clone
        // would bounce its count between the cores on every storage call).
        {
            let by_type = self.by_type.read().unwrap_or_else(|e| e.into_inner());
            if let Some(series) = by_type.get(segment) {
                self.record(series, op, elapsed);
                return;
            }
        }
        let series = Arc::new(TypeSeries {
            label: type_label(segment),
            operations: Default::default(),
        });
        let series = self
            .by_type
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(segment.to_string())
            .or_insert(series)
            .clone();
        self.record(&series, op, elapsed);
    }

    fn record(&self, series: &TypeSeries, op: usize, elapsed: f64) {
        series.operations[op]
            .get_or_init(|| {
                self.family.get_or_create_owned(&[
                    ("operation", OPERATIONS[op].into()),
                    ("type", series.label.clone()),
                ])
            })
            .observe(elapsed);
    }
}

/// The part of a key that names its resource: `/registry/configmaps/ns/x` → `configmaps`,
/// `/registry/coordination.k8s.io/leases/ns/x` → `coordination.k8s.io/leases` (a group has
/// dots; a core resource has none).
fn type_segment(key: &str) -> &str {
    let rest = key.trim_start_matches('/');
    let rest = rest.split_once('/').map_or("", |(_, r)| r);
    let mut parts = rest.splitn(3, '/');
    let first = parts.next().unwrap_or("");
    match parts.next() {
        Some(second) if first.contains('.') => &rest[..first.len() + 1 + second.len()],
        _ => first,
    }
}

/// `group/resource` → `resource.group`, as kube-apiserver writes a group resource.
fn type_label(segment: &str) -> String {
    match segment.split_once('/') {
        Some((group, resource)) => format!("{resource}.{group}"),
        None => segment.to_string(),
    }
}

/// A store whose requests are timed into [`StorageMetrics`].
pub struct TimedStore {
    inner: Arc<dyn Store>,
    metrics: StorageMetrics,
}

impl TimedStore {
    pub fn new(inner: Arc<dyn Store>, metrics: StorageMetrics) -> Self {
        Self { inner, metrics }
    }
}

#[async_trait]
impl Store for TimedStore {
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let started = Instant::now();
        let r = self.inner.create(key, value).await;
        self.metrics.observe(CREATE, key, started);
        r
    }

    async fn update(&self, key: &str, value: Bytes, expected: Revision) -> Result<KeyValue> {
        let started = Instant::now();
        let r = self.inner.update(key, value, expected).await;
        self.metrics.observe(UPDATE, key, started);
        r
    }

    async fn update_chain(
        &self,
        key: &str,
        values: Vec<Bytes>,
        expected: Revision,
    ) -> Result<Vec<KeyValue>> {
        let started = Instant::now();
        let links = values.len();
        let r = self.inner.update_chain(key, values, expected).await;
        // Each link is an update, and each waited as long as the chain.
        for _ in 0..links {
            self.metrics.observe(UPDATE, key, started);
        }
        r
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<(KeyValue, Revision)> {
        let started = Instant::now();
        let r = self.inner.delete(key, expected).await;
        self.metrics.observe(DELETE, key, started);
        r
    }

    async fn get(
        &self,
        key: &str,
        revision: Option<Revision>,
    ) -> Result<(Option<KeyValue>, Revision)> {
        let started = Instant::now();
        let r = self.inner.get(key, revision).await;
        self.metrics.observe(GET, key, started);
        r
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let started = Instant::now();
        let key = req.prefix.clone();
        let r = self.inner.range(req).await;
        self.metrics.observe(LIST, &key, started);
        r
    }

    async fn changes(&self, after: Revision, limit: usize) -> Result<Changes> {
        self.inner.changes(after, limit).await
    }

    fn current_revision(&self) -> Revision {
        self.inner.current_revision()
    }

    async fn consistent_revision(&self) -> Result<Revision> {
        self.inner.consistent_revision().await
    }

    fn request_progress(&self) -> bool {
        self.inner.request_progress()
    }

    async fn stale(&self, kv: &KeyValue) -> Result<bool> {
        self.inner.stale(kv).await
    }

    fn compacted_revision(&self) -> Revision {
        self.inner.compacted_revision()
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    fn subscribe(&self) -> tokio::sync::watch::Receiver<Revision> {
        self.inner.subscribe()
    }
}

/// The embedded engine's commits and disk reads for `/metrics`, read from
/// [`RocksStore::stats`](strata_store_rocksdb::RocksStore::stats) at each scrape:
/// `strata_rocksdb_commit_duration_seconds` (a histogram of the write batches' commit times,
/// in etcd's WAL fsync buckets), `strata_rocksdb_writes_total` (writes committed: over the
/// histogram's count, the writes one fsync carries) and `strata_rocksdb_disk_gets_total`.
pub struct RocksCollector(pub Arc<strata_store_rocksdb::RocksStore>);

impl std::fmt::Debug for RocksCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RocksCollector")
            .field(&self.0.stats())
            .finish()
    }
}

impl Collector for RocksCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let stats = self.0.stats();
        let mut buckets: Vec<(f64, u64)> = strata_store_rocksdb::COMMIT_BUCKETS
            .into_iter()
            .zip(stats.commit_buckets)
            .collect();
        // A commit between the reads of the counters may show in a bucket and not yet in the
        // count: the count is never below the buckets' sum.
        let bucketed: u64 = stats.commit_buckets.iter().sum();
        let count = stats.batches.max(bucketed);
        buckets.push((f64::INFINITY, count - bucketed));
        let mut e = encoder.encode_descriptor(
            "strata_rocksdb_commit_duration_seconds",
            "Time the embedded store took to commit a write batch (its WAL, memtables and \
             fsync) in seconds",
            None,
            MetricType::Histogram,
        )?;
        e.encode_histogram::<NoLabelSet>(stats.commit_nanos as f64 / 1e9, count, &buckets, None)?;
        let counters = [
            (
                "strata_rocksdb_writes",
                "Writes the embedded store committed (revisions handed out)",
                stats.writes,
            ),
            (
                "strata_rocksdb_disk_gets",
                "Point reads of the embedded store that read the disk",
                stats.disk_gets,
            ),
        ];
        for (name, help, n) in counters {
            let e = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(n).encode(e)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_resource() {
        let t = |k: &str| type_label(type_segment(k));
        assert_eq!(t("/registry/configmaps/ns/x"), "configmaps");
        assert_eq!(t("/registry/namespaces/x"), "namespaces");
        assert_eq!(t("/registry/configmaps/"), "configmaps");
        assert_eq!(
            t("/registry/coordination.k8s.io/leases/ns/x"),
            "leases.coordination.k8s.io"
        );
        assert_eq!(
            t("/registry/apiextensions.k8s.io/customresourcedefinitions/x"),
            "customresourcedefinitions.apiextensions.k8s.io"
        );
        assert_eq!(t("/registry/strata/pki/ca"), "strata");
    }

    #[tokio::test]
    async fn requests_are_timed_by_operation_and_type() {
        let metrics = strata_http::Metrics::new();
        let store = TimedStore::new(
            Arc::new(strata_store::MemoryStore::new()),
            StorageMetrics::new(&metrics),
        );
        store
            .create("/registry/configmaps/d/a", Bytes::from_static(b"{}"))
            .await
            .unwrap();
        store.get("/registry/configmaps/d/a", None).await.unwrap();
        store.get("/registry/configmaps/d/b", None).await.unwrap();
        let text = metrics.encode(None);
        let count = |op: &str| {
            format!("etcd_request_duration_seconds_count{{operation=\"{op}\",type=\"configmaps\"}}")
        };
        assert!(text.contains(&format!("{} 1\n", count("create"))), "{text}");
        assert!(text.contains(&format!("{} 2\n", count("get"))), "{text}");
        assert!(text.contains(
            "etcd_request_duration_seconds_bucket{operation=\"get\",type=\"configmaps\",le=\"0.005\"}"
        ));
    }
}
