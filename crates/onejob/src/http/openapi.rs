//! The OpenAPI 3.1 description of the API, generated from the handlers' annotations and
//! served at `/openapi.json`. The same document is committed as `openapi.json` at the
//! repository root; a test fails when the two drift (regenerate it with
//! `cargo run -p onejob -- openapi > openapi.json`).
//!
//! The document is written for client generators as much as for readers: every operation
//! has a unique camelCase `operationId` (`submitJob`, `getJob`, …), the problem answers
//! are defined once under `components/responses` ([`BadRequest`], [`NotFound`], …) and
//! referenced, and the dashboard's HTML routes (`/ui`) are left out: they are pages for
//! browsers, not API calls.

use axum::Json;
use utoipa::{
    Modify, OpenApi,
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
};

use super::{
    attempts, certificates, gateway, health, jobs, lifecycle, metrics,
    openapi_links::Links,
    responses::{
        BadRequest, Conflict, ContentTooLarge, Forbidden, KeyReused, NotFound, Problem,
        Unauthorized, Unavailable, UnsupportedMediaType,
    },
    view,
};

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "onejob",
        description = "One user intent, one job. Submit a job under an idempotency key; every \
                       retry, double click or recovery lands on the same job, and exactly one \
                       attempt's result wins. Errors are RFC 9457 problem documents \
                       (`application/problem+json`) whose `type` is one of the `Problem` \
                       schema's values."
    ),
    paths(
        jobs::submit,
        jobs::by_key,
        jobs::get,
        jobs::attempts,
        jobs::events,
        lifecycle::cancel,
        lifecycle::retry,
        jobs::list_attempts,
        attempts::resolve,
        certificates::list,
        gateway::chat_completions,
        gateway::embeddings,
        gateway::responses,
        gateway::images,
        gateway::messages,
        gateway::models::models,
        gateway::models::model,
        health::healthz,
        health::readyz,
        metrics::render,
    ),
    components(schemas(
        Problem,
        jobs::SubmitBody,
        view::JobView,
        view::StepView,
        view::JobList,
        jobs::JobOrList,
        view::AttemptView,
        view::AttemptsView,
        view::AttemptList,
        view::EventView,
        view::EventsView,
        attempts::ResolveBody,
        attempts::Outcome,
        attempts::Resolved,
        certificates::CertificateView,
        certificates::CertificateList,
        gateway::ChatRequest,
        gateway::ChatMessage,
        gateway::StreamOptions,
        gateway::OpenAiError,
        gateway::OpenAiErrorDetail,
        gateway::AnthropicError,
        gateway::AnthropicErrorDetail,
    ), responses(
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        ContentTooLarge,
        UnsupportedMediaType,
        KeyReused,
        Unavailable,
    )),
    modifiers(&BearerAuth, &Links),
    security(("bearer" = [])),
    tags(
        (name = "jobs", description = "Submitting and following jobs"),
        (name = "operators", description = "Out-of-band resolution (operator keys)"),
        (name = "gateway", description = "OpenAI-compatible: one Idempotency-Key makes an OpenAI SDK call one job; errors in OpenAI's shape"),
        (name = "health", description = "Liveness and readiness"),
    )
)]
pub struct ApiDoc;

/// `GET /openapi.json`.
pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// The document as committed: pretty JSON with a trailing newline.
pub fn pretty() -> String {
    let mut text =
        serde_json::to_string_pretty(&ApiDoc::openapi()).expect("the OpenAPI document serialises");
    text.push('\n');
    text
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("oj_<id>_<secret>")
                    .description(Some("An API key from `onejob keys create`."))
                    .build(),
            ),
        );
    }
}
