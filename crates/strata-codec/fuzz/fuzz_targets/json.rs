//! JSON: the plain and the strict (duplicate-reporting) decoders never panic, agree with each
//! other, and what they decode encodes back to the same value, compact or pretty.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_codec::{json, strict};

fuzz_target!(|data: &[u8]| {
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
