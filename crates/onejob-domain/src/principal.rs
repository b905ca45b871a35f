//! The principal: who is calling. Always derived from the API key, never from a body.

use serde::{Deserialize, Serialize};

/// A `(tenant, user)` pair that owns jobs. Jobs are only ever visible to their principal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Principal {
    /// The tenant, kept in clear for operators.
    pub tenant: String,
    /// The user inside the tenant.
    pub user: String,
}

impl Principal {
    /// Builds a principal.
    pub fn new(tenant: impl Into<String>, user: impl Into<String>) -> Self {
        Self {
            tenant: tenant.into(),
            user: user.into(),
        }
    }
}
