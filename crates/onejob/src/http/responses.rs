//! The problem answers every operation shares, for the OpenAPI document: the [`Problem`]
//! schema and one `components/responses` entry per shared answer ([`BadRequest`],
//! [`NotFound`], …), which the handlers reference as `(status = …, response =
//! responses::Name)`. Kept apart from `openapi.rs`, which lists the handlers, so that the
//! handlers and the document do not import each other.

use utoipa::{
    PartialSchema, ToResponse, ToSchema,
    openapi::{
        ContentBuilder, ObjectBuilder, Ref, RefOr, Schema, Type,
        header::HeaderBuilder,
        response::{Response, ResponseBuilder},
    },
};

use super::problem::{PROBLEM_BASE, PROBLEM_JSON, ProblemType};

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
                 for key-reused (and `step`, for a step of an agent run), `known_kinds` for unknown-kind, `limit_bytes` for \
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
/// by the operations as `(status = …, response = responses::Name)`.
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
