//! JSON: the plain and the strict (duplicate-reporting) decoders never panic, agree with each
//! other and with serde_json (the same value in the same member order, the same error), and what
//! they decode encodes back to the same value, compact or pretty.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_codec::{json, strict};

fuzz_target!(|data: &[u8]| {
    // The codec's own parser answers for well-formed documents; serde_json is the reference.
    match (
        json::from_slice(data),
        serde_json::from_slice::<serde_json::Value>(data),
    ) {
        (Ok(ours), Ok(reference)) => assert_eq!(json::compact(&ours), json::compact(&reference)),
        (Err(ours), Err(reference)) => assert_eq!(ours.to_string(), reference.to_string()),
        (ours, reference) => panic!("from_slice {ours:?}, serde_json {reference:?}"),
    }
    let plain = json::decode(data);
    let strict = strict::json(data);
    match (&plain, &strict) {
        (Ok(v), Ok(d)) => assert_eq!(v, &d.value, "strict and plain decoders disagree"),
        (Err(_), Err(_)) => {}
        _ => panic!("one decoder failed: {plain:?} / {strict:?}"),
    }
    if let Ok(v) = plain {
        for pretty in [false, true] {
            let again = json::decode(&json::encode(&v, pretty)).expect("re-decode");
            assert_eq!(again, v);
        }
    }
});
