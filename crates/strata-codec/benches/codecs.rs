//! Encoding and decoding speed of each codec (JSON, YAML, protobuf, CBOR) on one ServiceAccount
//! and on a ServiceAccountList of 10,000 items. It measures the codecs alone, not HTTP or the
//! watch cache.
//!
//! The object is the golden fixture `testdata/HEAD/v1.ServiceAccount.json` (every field set,
//! managedFields included); the list's items are copies of it with their own name, uid and
//! resourceVersion. Throughput counts each format's own bytes. `decode/json-strict` is the
//! decoder of request bodies (`strict::json`, which also finds repeated member names). Run with
//! `cargo bench -p strata-codec --bench codecs`; results are in `docs/benchmarks.md`.
//!
//! Values are built and dropped with mimalloc, the `strata` server's allocator: a decoded
//! ServiceAccount is about 150 allocations, so the allocator is part of what a decode costs
//! in the server.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use serde_json::{json, Value};
use strata_codec::{cbor, json, proto, strict, yaml};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const LIST_ITEMS: usize = 10_000;

fn service_account() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/HEAD/v1.ServiceAccount.json"
    );
    let bytes = std::fs::read(path).expect("read the ServiceAccount fixture");
    json::decode(&bytes).expect("the fixture is JSON")
}

fn service_account_list(template: &Value, n: usize) -> Value {
    let mut item = template.clone();
    if let Value::Object(m) = &mut item {
        m.shift_remove("kind");
        m.shift_remove("apiVersion");
    }
    let items: Vec<Value> = (0..n)
        .map(|i| {
            let mut item = item.clone();
            let meta = &mut item["metadata"];
            meta["name"] = json!(format!("ci-runner-{i:05}"));
            meta["uid"] = json!(format!("3f6c1a52-9b1e-4d0a-8c7e-{i:012x}"));
            meta["resourceVersion"] = json!((48_213 + i).to_string());
            item
        })
        .collect();
    json!({
        "kind": "ServiceAccountList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "58213"},
        "items": items,
    })
}

/// One codec: its name, an encoder and a decoder.
struct Codec {
    name: &'static str,
    encode: fn(&Value) -> Vec<u8>,
    decode: fn(&[u8], &str) -> Value,
}

const CODECS: [Codec; 4] = [
    Codec {
        name: "json",
        encode: |v| json::encode(v, false),
        decode: |b, _| json::decode(b).unwrap(),
    },
    Codec {
        name: "yaml",
        encode: yaml::encode,
        decode: |b, _| yaml::decode(b).unwrap(),
    },
    Codec {
        name: "protobuf",
        encode: |v| proto::encode(v).unwrap(),
        decode: |b, kind| proto::decode(b, "", kind).unwrap(),
    },
    Codec {
        name: "cbor",
        encode: cbor::encode,
        decode: |b, _| cbor::decode(b).unwrap(),
    },
];

fn bench_all(group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>, v: &Value) {
    let kind = v["kind"].as_str().unwrap_or_default().to_string();
    for codec in &CODECS {
        let bytes = (codec.encode)(v);
        // Every codec must give the value back, or its numbers mean nothing.
        assert_eq!(
            &(codec.decode)(&bytes, &kind),
            v,
            "{} round trip",
            codec.name
        );
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.bench_function(format!("encode/{}", codec.name), |b| {
            b.iter(|| (codec.encode)(black_box(v)))
        });
        group.bench_function(format!("decode/{}", codec.name), |b| {
            b.iter(|| (codec.decode)(black_box(&bytes), &kind))
        });
    }
}

/// The strict JSON decoder, which request bodies go through.
fn bench_strict(group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>, v: &Value) {
    let bytes = json::encode(v, false);
    let decoded = strict::json(&bytes).unwrap();
    assert_eq!(&decoded.value, v, "strict JSON round trip");
    assert!(decoded.duplicates.is_empty());
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("decode/json-strict", |b| {
        b.iter(|| strict::json(black_box(&bytes)).unwrap())
    });
}

fn codecs(c: &mut Criterion) {
    let sa = service_account();
    let mut group = c.benchmark_group("ServiceAccount");
    bench_all(&mut group, &sa);
    bench_strict(&mut group, &sa);
    group.finish();

    let list = service_account_list(&sa, LIST_ITEMS);
    let mut group = c.benchmark_group("ServiceAccountList-10000");
    // One operation takes tens to hundreds of milliseconds: fewer, longer samples.
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(10));
    bench_all(&mut group, &list);
    bench_strict(&mut group, &list);
    group.finish();
}

criterion_group!(benches, codecs);
criterion_main!(benches);
