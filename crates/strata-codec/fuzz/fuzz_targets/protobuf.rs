//! Protobuf: for every kind with a protobuf form (the first input byte picks one), decoding the
//! rest as an enveloped object and as a bare message never panics, and a decoded message
//! encodes (through the direct writer) to bytes that decode to the same value and encode again
//! to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_codec::proto;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let types: Vec<(String, &str)> = proto::message_types().collect();
    let (api_version, kind) = &types[usize::from(pick) % types.len()];
    let (api_version, kind) = (api_version.as_str(), *kind);
    let _ = proto::open(rest);
    if let Ok(v) = proto::decode(rest, api_version, kind) {
        let bytes = proto::encode(&v).expect("a decoded object encodes");
        assert_eq!(proto::decode(&bytes, "", "").expect("re-decode"), v);
    }
    if let Ok(v) = proto::decode_message(api_version, kind, rest) {
        let bytes = proto::encode_message(api_version, kind, &v).expect("a decoded message encodes");
        assert_eq!(
            proto::decode_message(api_version, kind, &bytes).expect("re-decode"),
            v
        );
        assert_eq!(proto::encode_message(api_version, kind, &v).unwrap(), bytes);
    }
});
