//! `onejob openapi`: print the OpenAPI 3.1 document the server serves at `/openapi.json`.

use crate::http::openapi;

/// Runs `onejob openapi`.
pub fn run() -> anyhow::Result<()> {
    print!("{}", openapi::pretty());
    Ok(())
}
