//! `GET /v1/models` and `GET /v1/models/{model}`: the model names the gateway serves, in
//! OpenAI's shapes.

use std::sync::Arc;

use axum::{
    Json,
    extract::{Path, State},
    http::HeaderMap,
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{OpenAiError, caller, gateway_problem, openai_error};
use crate::{gateway::Endpoint, http::AppState, jobs::gateway::GatewayError};

/// A served model, as OpenAI describes one.
fn model_object(model: &str) -> Value {
    json!({ "id": model, "object": "model", "created": 0, "owned_by": "onejob" })
}

/// `GET /v1/models`: the model names the gateway serves, in OpenAI's list shape.
#[utoipa::path(
    get,
    path = "/v1/models",
    tag = "gateway",
    operation_id = "listModels",
    responses(
        (status = 200, description = "The models served at POST /v1/chat/completions", body = Object),
        (status = 401, description = "Missing or invalid API key", body = OpenAiError),
        (status = 503, description = "The database is unavailable; retry after Retry-After", body = OpenAiError),
    )
)]
pub async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(problem) = caller(&headers, &state).await {
        return openai_error(problem);
    }
    let data: Vec<Value> = state
        .gateway
        .models()
        .iter()
        .map(|model| model_object(model))
        .collect();
    Json(json!({ "object": "list", "data": data })).into_response()
}

/// `GET /v1/models/{model}`: one served model, as in the list (an OpenAI SDK's
/// `models.retrieve`).
#[utoipa::path(
    get,
    path = "/v1/models/{model}",
    tag = "gateway",
    operation_id = "retrieveModel",
    params(("model" = String, Path, description = "One of the names GET /v1/models lists")),
    responses(
        (status = 200, description = "The model", body = Object),
        (status = 401, description = "Missing or invalid API key", body = OpenAiError),
        (status = 404, description = "No kind serves this model", body = OpenAiError),
        (status = 503, description = "The database is unavailable; retry after Retry-After", body = OpenAiError),
    )
)]
pub async fn model(
    State(state): State<Arc<AppState>>,
    Path(model): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(problem) = caller(&headers, &state).await {
        return openai_error(problem);
    }
    if state.gateway.serves(&model) {
        return Json(model_object(&model)).into_response();
    }
    openai_error(gateway_problem(
        Endpoint::Chat,
        GatewayError::UnknownModel {
            model,
            models: state.gateway.models(),
        },
    ))
}
