//! Fuzzes `IdempotencyKey::from_header` with arbitrary header bytes: it never panics, what
//! it accepts is 1–255 visible ASCII characters, and the RFC 8941 quoted form of an accepted
//! key names the same key.
#![no_main]

use libfuzzer_sys::fuzz_target;
use onejob_domain::IdempotencyKey;

fuzz_target!(|data: &[u8]| {
    let Ok(key) = IdempotencyKey::from_header(data) else {
        return;
    };
    let raw = key.as_str();
    assert!((1..=255).contains(&raw.len()), "{raw:?}");
    assert!(raw.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{raw:?}");
    let quoted = format!("\"{}\"", raw.replace('\\', "\\\\").replace('"', "\\\""));
    let again = IdempotencyKey::from_header(quoted.as_bytes()).expect("quoted form parses");
    assert_eq!(again.as_str(), raw);
});
