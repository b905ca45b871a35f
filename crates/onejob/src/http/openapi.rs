//! The OpenAPI 3.1 description of the API, generated from the handlers' annotations and
//! served at `/openapi.json`. The same document is committed as `openapi.json` at the
//! repository root; a test fails when the two drift (regenerate it with
//! `cargo run -p onejob -- openapi > openapi.json`).

use axum::Json;
use utoipa::{
    Modify, OpenApi, PartialSchema, ToSchema,
    openapi::{
        ObjectBuilder, RefOr, Schema, Type,
        security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
    },
};

use super::{
    attempts, certificates, gateway, health, jobs, lifecycle, metrics,
    openapi_links::Links,
    problem::{PROBLEM_BASE, ProblemType},
    ui::openapi::Dashboard,
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
        gateway::models,
        health::healthz,
        health::readyz,
        metrics::render,
    ),
    components(schemas(
        Problem,
        jobs::SubmitBody,
        view::JobView,
        view::JobList,
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
    )),
    modifiers(&BearerAuth, &Dashboard, &Links),
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

/// An RFC 9457 problem document, as every error is answered.
pub struct Problem;

impl PartialSchema for Problem {
    fn schema() -> RefOr<Schema> {
        let types: Vec<String> = ProblemType::ALL.iter().map(|t| t.uri()).collect();
        let string = || ObjectBuilder::new().schema_type(Type::String);
        ObjectBuilder::new()
            .description(Some(format!(
                "RFC 9457 problem details. `type` is stable (`{PROBLEM_BASE}<slug>`); \
                 extension members carry specifics: `errors` [{{path, message}}] for \
                 params-invalid and result-invalid, `changed`, `kind_changed` and `job_id` \
                 for key-reused, `known_kinds` for unknown-kind, `limit_bytes` for \
                 body-too-large, `state` for invalid-state."
            )))
            .property("type", string().enum_values(Some(types)))
            .required("type")
            .property("title", string())
            .required("title")
            .property("status", ObjectBuilder::new().schema_type(Type::Integer))
            .required("status")
            .property(
                "detail",
                string().description(Some("What was wrong and how to fix it.")),
            )
            .required("detail")
            .into()
    }
}

impl ToSchema for Problem {
    fn name() -> std::borrow::Cow<'static, str> {
        "Problem".into()
    }
}
