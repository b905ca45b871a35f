//! A violation found at one place of a JSON document (a job's params against its kind's
//! schema, a gateway request against its endpoint's rules): where, and what was wanted.

use serde::Serialize;

/// One violation: where, and what was wanted (never the offending value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    /// JSON Pointer into the validated document.
    pub path: String,
    /// What is wrong, with the value masked.
    pub message: String,
}
