//! Bearer authentication: the [`Caller`] extractor turns `Authorization: Bearer oj_…` into a
//! principal. Unknown ids and wrong secrets get the same 401, so a probe learns nothing.
//! [`Caller::from_token`] is the one key check, shared with the dashboard's cookie.

use std::sync::Arc;

use axum::{extract::FromRequestParts, http::request::Parts};
use onejob_domain::Principal;

use super::{
    AppState,
    problem::{Problem, ProblemType},
};
use crate::api_key::{self, KeyRing};

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Whose jobs this request may see.
    pub principal: Principal,
    /// The API key's public id (recorded as the actor of events).
    pub key_id: String,
    /// Whether the key may use operator endpoints.
    pub operator: bool,
}

impl Caller {
    /// How this caller appears in event logs.
    pub fn actor(&self) -> String {
        format!("key:{}", self.key_id)
    }

    /// Refuses callers whose key is not an operator key.
    pub fn require_operator(&self) -> Result<(), Problem> {
        if self.operator {
            Ok(())
        } else {
            Err(Problem::new(
                ProblemType::Forbidden,
                "this endpoint needs an operator key (onejob keys create --operator)",
            ))
        }
    }
}

impl FromRequestParts<Arc<AppState>> for Caller {
    type Rejection = Problem;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        Caller::from_headers(&parts.headers, state).await
    }
}

impl Caller {
    /// The caller a request's `Authorization: Bearer` header authenticates.
    pub async fn from_headers(
        headers: &axum::http::HeaderMap,
        state: &AppState,
    ) -> Result<Caller, Problem> {
        let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
            return Err(Problem::new(
                ProblemType::Unauthorized,
                "send your API key as `Authorization: Bearer oj_…`",
            ));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| {
                let (scheme, token) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .ok_or_else(invalid_key)?;
        Caller::from_token(&state.keys, token).await
    }
}

impl Caller {
    /// The caller an API key token (`oj_<id>_<secret>`) authenticates: an `unauthorized`
    /// problem for a malformed, unknown, revoked or wrong key alike.
    pub async fn from_token(keys: &KeyRing, token: &str) -> Result<Caller, Problem> {
        let (id, secret) = api_key::parse(token).ok_or_else(invalid_key)?;
        let record = keys.lookup(id).await?.ok_or_else(invalid_key)?;
        if !api_key::verify(&record, secret) {
            return Err(invalid_key());
        }
        Ok(Caller {
            principal: record.principal,
            key_id: record.id,
            operator: record.operator,
        })
    }
}

fn invalid_key() -> Problem {
    Problem::new(
        ProblemType::Unauthorized,
        "the API key is not valid; check it or create one with `onejob keys create`",
    )
}
