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
    Modify, OpenApi, PartialSchema, ToResponse, ToSchema,
    openapi::{
        ContentBuilder, ObjectBuilder, Ref, RefOr, Schema, Type,
        header::HeaderBuilder,
        response::{Response, ResponseBuilder},
        security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
    },
};

use super::{
    attempts, certificates, gateway, health, jobs, lifecycle, metrics,
    openapi_links::Links,
    problem::{PROBLEM_BASE, PROBLEM_JSON, ProblemType},
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
        gateway::model,
        health::healthz,
        health::readyz,
        metrics::render,
    ),
    components(schemas(
        Problem,
        jobs::SubmitBody,
        view::JobView,
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

/// Declares the shared problem answers: one `components/responses` entry each, referenced
/// by the operations as `(status = …, response = openapi::Name)`.
macro_rules! problem_responses {
    ($($(#[$doc:meta])* $name:ident => $description:literal,)+) => {
        $(
            $(#[$doc])*
            pub struct $name;

            impl<'r> ToResponse<'r> for $name {
                fn response() -> (&'r str, RefOr<Response>) {
                    (stringify!($name), problem_response($description).build().into())
                }
            }
        )+
    };
}

problem_responses! {
    /// `400`: the request itself is wrong.
    BadRequest => "The request is malformed: a missing or malformed Idempotency-Key \
                   (idempotency-key-missing, idempotency-key-invalid), bad JSON \
                   (invalid-json), a malformed id, query or body (invalid-id, \
                   invalid-request), an unknown kind (unknown-kind, with known_kinds), \
                   params or a result failing the kind's schema or limits (params-invalid, \
                   result-invalid, with errors [{path, message}]). `detail` says what and \
                   how to fix it; resending it unchanged fails the same way.",
    /// `401`.
    Unauthorized => "Missing or invalid API key (unauthorized): send `Authorization: \
                     Bearer <key>` with a key from `onejob keys create`.",
    /// `403`.
    Forbidden => "This API key may not do that (forbidden): it needs an operator key.",
    /// `404`.
    NotFound => "No such resource for this key (not-found); another principal's is \
                 indistinguishable from none.",
    /// `409`.
    Conflict => "The job or attempt is not in a state that allows this (invalid-state, \
                 with its `state`).",
    /// `413`.
    ContentTooLarge => "The request body is over max_body_bytes (body-too-large, with \
                        limit_bytes).",
    /// `415`.
    UnsupportedMediaType => "The request body must be JSON (unsupported-media-type): send \
                             `Content-Type: application/json`.",
    /// `422`: the idempotency key names another request.
    KeyReused => "The Idempotency-Key already names a job with other params or another \
                  kind (key-reused, with job_id, kind_changed and the changed param paths, \
                  never their values). The job is untouched and nothing new runs: retry \
                  with the original params, or name a new intent with a new key.",
}

/// `503`: the one shared answer worth retrying, with its `Retry-After`.
pub struct Unavailable;

impl<'r> ToResponse<'r> for Unavailable {
    fn response() -> (&'r str, RefOr<Response>) {
        let response = problem_response(
            "The database is unavailable (unavailable): retry the same request after \
             Retry-After.",
        )
        .header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(0)),
                ))
                .description(Some("Seconds to wait before retrying"))
                .build(),
        );
        ("Unavailable", response.build().into())
    }
}

/// A problem answer: `description`, and a [`Problem`] as `application/problem+json`.
fn problem_response(description: &str) -> ResponseBuilder {
    ResponseBuilder::new().description(description).content(
        PROBLEM_JSON,
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name(Problem::name())))
            .build(),
    )
}
