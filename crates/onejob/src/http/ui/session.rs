//! Who is signed in to the dashboard: the [`Session`] extractor reads the sign-in cookie and
//! resolves it with [`Caller::from_token`], exactly the check a Bearer header gets. A page
//! requested without a valid cookie redirects to the sign-in form.

use std::sync::Arc;

use axum::{extract::FromRequestParts, http::HeaderMap, http::request::Parts};

use super::{
    chrome::{Chrome, Section},
    cookie,
    csrf::{self, CsrfError},
    error::PageError,
};
use crate::{
    http::{AppState, Caller, ProblemType},
    store::Scope,
};

/// A signed-in dashboard user.
#[derive(Debug, Clone)]
pub struct Session {
    /// The caller the cookie's key authenticates.
    pub caller: Caller,
    key: String,
}

impl Session {
    /// The CSRF token this session's forms carry.
    pub fn csrf(&self) -> String {
        csrf::token(&self.key)
    }

    /// Checks a cookie-authenticated POST: same origin, and the session's own token.
    pub fn check_post(&self, request: &HeaderMap, token: Option<&str>) -> Result<(), CsrfError> {
        csrf::check_origin(request)?;
        csrf::check_token(&self.key, token)
    }

    /// Whose records cross-job pages show: an operator's whole tenant, anyone else's own.
    pub fn scope(&self) -> Scope {
        Scope {
            tenant: self.caller.principal.tenant.clone(),
            user: (!self.caller.operator).then(|| self.caller.principal.user.clone()),
        }
    }

    /// The page frame for this session, with `section` highlighted.
    pub fn chrome(&self, section: Section) -> Option<Chrome> {
        Chrome::signed_in(&self.caller, self.csrf(), section)
    }
}

impl FromRequestParts<Arc<AppState>> for Session {
    type Rejection = PageError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let key = cookie::read(&parts.headers).ok_or(PageError::SignIn)?;
        match Caller::from_token(&state.keys, key).await {
            Ok(caller) => Ok(Session {
                caller,
                key: key.to_owned(),
            }),
            Err(problem) if problem.kind == ProblemType::Unauthorized => Err(PageError::SignIn),
            Err(problem) => Err(PageError::Problem(problem)),
        }
    }
}
