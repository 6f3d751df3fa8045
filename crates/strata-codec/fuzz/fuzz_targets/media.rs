//! Media types: `parse_accept` and `MediaType::parse` never panic on any text, and what they
//! return is well formed (lower-case essences with a `/`, qualities in 1..=1000, best first).
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_codec::media::{parse_accept, MediaType};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let ranges = parse_accept(text);
    for pair in ranges.windows(2) {
        assert!(pair[0].quality >= pair[1].quality, "not ordered by quality");
    }
    for range in &ranges {
        assert!((1..=1000).contains(&range.quality));
        assert!(range.media.essence.contains('/'));
        let _ = range.matches("application/json");
        let _ = range.matches(text);
    }
    if let Some(media) = MediaType::parse(text) {
        assert_eq!(media.essence, media.essence.to_ascii_lowercase());
        let _ = media.param("q");
        let _ = media.to_string();
    }
});
