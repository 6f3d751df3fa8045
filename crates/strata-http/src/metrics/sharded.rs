//! Counters, gauges and histograms whose updates stay on the updating thread's own cache line:
//! each metric keeps one slot per shard, a thread always updates the same shard, and the
//! encoder adds the shards up at scrape time. Every request updates a dozen metrics shared by
//! every request of its kind; with one atomic (or one mutex) per metric, as the client
//! library's own types have, those cache lines bounce between the cores serving requests.

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::exemplar::Exemplar;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Shards per metric: more than the server's worker threads, so that threads rarely share.
const SHARDS: usize = 8;

/// Most buckets a [`Histogram`] has (its bounds and the `+Inf` one).
const MAX_BUCKETS: usize = 32;

/// The calling thread's shard.
fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

/// A value on a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

/// A monotonic counter.
#[derive(Clone, Debug)]
pub struct Counter(Arc<[Padded<AtomicU64>; SHARDS]>);

impl Default for Counter {
    fn default() -> Self {
        Self(Arc::new(std::array::from_fn(|_| Padded::default())))
    }
}

impl Counter {
    pub fn inc(&self) {
        self.0[shard()].0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
    }
}

impl TypedMetric for Counter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for Counter {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        ConstCounter::new(self.get()).encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// A gauge moved up and down; a thread may move it down on another shard than the one it was
/// moved up on (the sum is what counts).
#[derive(Clone, Debug)]
pub struct Gauge(Arc<[Padded<AtomicI64>; SHARDS]>);

impl Default for Gauge {
    fn default() -> Self {
        Self(Arc::new(std::array::from_fn(|_| Padded::default())))
    }
}

impl Gauge {
    pub fn inc(&self) {
        self.0[shard()].0.fetch_add(1, Ordering::Relaxed);
    }

    pub fn dec(&self) {
        self.0[shard()].0.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
    }
}

impl TypedMetric for Gauge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for Gauge {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        ConstGauge::new(self.get()).encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// One shard of a histogram: observations per bucket and their sum (an `f64`'s bits).
#[derive(Debug)]
struct HistogramShard {
    counts: [AtomicU64; MAX_BUCKETS],
    sum: AtomicU64,
}

impl Default for HistogramShard {
    fn default() -> Self {
        Self {
            counts: std::array::from_fn(|_| AtomicU64::new(0)),
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }
}

#[derive(Debug)]
struct HistogramInner {
    /// Upper bounds, ascending, without `+Inf`.
    bounds: Vec<f64>,
    shards: [Padded<HistogramShard>; SHARDS],
}

/// A histogram with fixed buckets.
#[derive(Clone, Debug)]
pub struct Histogram(Arc<HistogramInner>);

impl Histogram {
    /// A histogram with these upper bounds (ascending; `+Inf` is implied). Panics with more
    /// than 31 bounds.
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let bounds: Vec<f64> = bounds.into_iter().filter(|b| b.is_finite()).collect();
        assert!(bounds.len() < MAX_BUCKETS, "too many histogram buckets");
        Self(Arc::new(HistogramInner {
            bounds,
            shards: std::array::from_fn(|_| Padded::default()),
        }))
    }

    pub fn observe(&self, v: f64) {
        let inner = &*self.0;
        let bucket = inner
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(inner.bounds.len());
        let shard = &inner.shards[shard()].0;
        shard.counts[bucket].fetch_add(1, Ordering::Relaxed);
        // The shard is this thread's: the exchange fails only when another thread shares it.
        let mut sum = shard.sum.load(Ordering::Relaxed);
        loop {
            let new = (f64::from_bits(sum) + v).to_bits();
            match shard
                .sum
                .compare_exchange_weak(sum, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(current) => sum = current,
            }
        }
    }
}

impl TypedMetric for Histogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let inner = &*self.0;
        let mut buckets: Vec<(f64, u64)> = inner
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .map(|b| (b, 0))
            .collect();
        let mut sum = 0.0;
        for shard in &inner.shards {
            for (i, bucket) in buckets.iter_mut().enumerate() {
                bucket.1 += shard.0.counts[i].load(Ordering::Relaxed);
            }
            sum += f64::from_bits(shard.0.sum.load(Ordering::Relaxed));
        }
        let count = buckets.iter().map(|b| b.1).sum();
        encoder.encode_histogram::<NoLabelSet>(
            sum,
            count,
            &buckets,
            None::<&std::collections::HashMap<usize, Exemplar<NoLabelSet, f64>>>,
        )
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    #[test]
    fn shards_add_up_when_encoded() {
        let c = Counter::default();
        let g = Gauge::default();
        let h = Histogram::new([1.0, 2.0]);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for v in [0.5, 1.5, 3.0] {
                        c.inc();
                        g.inc();
                        h.observe(v);
                    }
                    g.dec();
                });
            }
        });
        let mut r = Registry::default();
        r.register("c", "c", c.clone());
        r.register("g", "g", g.clone());
        r.register("h", "h", h.clone());
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &r).unwrap();
        assert!(text.contains("\nc_total 12\n"), "{text}");
        assert!(text.contains("\ng 8\n"), "{text}");
        assert!(text.contains("\nh_bucket{le=\"1\"} 4\n"), "{text}");
        assert!(text.contains("\nh_bucket{le=\"2\"} 8\n"), "{text}");
        assert!(text.contains("\nh_bucket{le=\"+Inf\"} 12\n"), "{text}");
        assert!(text.contains("\nh_sum 20.0\n"), "{text}");
        assert!(text.contains("\nh_count 12\n"), "{text}");
    }
}
