//! YAML: decoding never panics, the plain decoder gives the strict (duplicate-reporting) one's
//! value, and what it decodes encodes back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_codec::{strict, yaml};

fuzz_target!(|data: &[u8]| {
    let plain = yaml::decode(data);
    assert_eq!(plain, strict::yaml(data).map(|d| d.value));
    if let Ok(v) = plain {
        let text = yaml::encode(&v);
        let again = yaml::decode(&text)
            .unwrap_or_else(|e| panic!("re-decode: {e}\n{}", String::from_utf8_lossy(&text)));
        assert_eq!(again, v, "{}", String::from_utf8_lossy(&text));
    }
});
