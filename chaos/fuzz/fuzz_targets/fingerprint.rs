//! Fuzzes strict JSON parsing, fingerprinting and the changed-paths diff with arbitrary
//! bytes, read as two documents (split at the first 0xFF byte): parsing never panics and
//! never accepts what serde_json refuses; formatting never changes a fingerprint; and two
//! documents differ in fingerprint exactly when `changed_paths` names a path (the `422`
//! problem never says "changed" about an identical intent, nor nothing about a different
//! one).
#![no_main]

use libfuzzer_sys::fuzz_target;
use onejob_domain::{
    Fingerprint,
    fingerprint::{canonical_bytes, changed_paths},
    params::parse_json_strict,
};

fuzz_target!(|data: &[u8]| {
    let (first, second) = match data.iter().position(|&b| b == 0xff) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let Ok(a) = parse_json_strict(first) else {
        return;
    };
    assert!(serde_json::from_slice::<serde_json::Value>(first).is_ok());
    let fingerprint = Fingerprint::of("kind", &a, None);
    // Formatting and key order never change the fingerprint.
    let pretty = serde_json::to_vec_pretty(&a).unwrap();
    let reparsed = parse_json_strict(&pretty).expect("a serialised value parses strictly");
    assert_eq!(Fingerprint::of("kind", &reparsed, None), fingerprint);
    let canonical = canonical_bytes(&a);
    let recanonical = canonical_bytes(&serde_json::from_slice(&canonical).unwrap());
    assert_eq!(canonical, recanonical, "canonical form is a fixed point");
    assert!(changed_paths(&a, &a, None).is_empty());

    let Ok(b) = parse_json_strict(second) else {
        return;
    };
    let same = Fingerprint::of("kind", &b, None) == fingerprint;
    let paths = changed_paths(&a, &b, None);
    assert_eq!(same, paths.is_empty(), "{a} vs {b}: {paths:?}");
    // Restricting params objects to intent fields never reports a path outside them (only
    // objects are restricted: params are objects; a change of the whole document is
    // reported as "/", onejob's convention for the params root).
    if !(a.is_object() && b.is_object()) {
        return;
    }
    let fields = vec!["prompt".to_owned()];
    for path in changed_paths(&a, &b, Some(&fields)) {
        assert!(path == "/" || path == "/prompt" || path.starts_with("/prompt/"), "{path}");
    }
});
