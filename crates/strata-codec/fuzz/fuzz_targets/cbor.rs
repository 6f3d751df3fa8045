//! CBOR: decoding never panics, and a decoded value encodes to bytes that decode to the same
//! value and encode again to the same bytes (the encoding is deterministic).
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_codec::cbor;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = cbor::decode(data) {
        let bytes = cbor::encode(&v);
        let again = cbor::decode(&bytes).expect("re-decode");
        assert_eq!(again, v);
        assert_eq!(cbor::encode(&again), bytes);
    }
});
