//! Fuzzes `Config::from_toml` (and compiling the kinds of what it accepts) with arbitrary
//! text: a bad file is an error naming what is wrong, never a panic.
#![no_main]

use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use onejob::{config::Config, kind::Kinds};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let loaded = Config::from_toml(
        text,
        Path::new("fuzz.toml"),
        PathBuf::from("/nonexistent-onejob-fuzz"),
        std::iter::empty(),
    );
    match loaded {
        Ok(config) => {
            if let Err(error) = Kinds::compile(&config) {
                assert!(!error.to_string().is_empty());
            }
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
});
