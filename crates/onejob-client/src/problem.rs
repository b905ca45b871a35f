//! Reading an error answer into an [`Error`]: RFC 9457 problem details, with the
//! `key-reused` problem turned into [`Error::KeyReused`].

use reqwest::StatusCode;
use serde_json::Value;
use uuid::Uuid;

use crate::{Error, error::PROBLEM_BASE};

/// The most of a non-problem body kept as the detail.
const MAX_DETAIL: usize = 500;

/// The error an answer with a non-success `status` and `body` stands for.
pub(crate) fn error_from(status: StatusCode, body: &[u8]) -> Error {
    let reason = status.canonical_reason().unwrap_or("error").to_owned();
    let Ok(Value::Object(document)) = serde_json::from_slice::<Value>(body) else {
        let text = String::from_utf8_lossy(body);
        let detail: String = text.trim().chars().take(MAX_DETAIL).collect();
        return Error::Problem {
            status: status.as_u16(),
            problem_type: "about:blank".to_owned(),
            title: reason,
            detail,
            body: Value::String(text.into_owned()),
        };
    };
    let text = |name: &str| {
        document
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let problem_type = text("type").unwrap_or_else(|| "about:blank".to_owned());
    if status == StatusCode::UNPROCESSABLE_ENTITY
        && problem_type == format!("{PROBLEM_BASE}key-reused")
        && let Some(job_id) = text("job_id").and_then(|id| Uuid::parse_str(&id).ok())
    {
        return Error::KeyReused {
            job_id,
            changed: document
                .get("changed")
                .and_then(Value::as_array)
                .map(|paths| {
                    paths
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            kind_changed: document
                .get("kind_changed")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        };
    }
    Error::Problem {
        status: status.as_u16(),
        problem_type,
        title: text("title").unwrap_or(reason),
        detail: text("detail").unwrap_or_default(),
        body: Value::Object(document),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn key_reused_problems_become_key_reused_with_their_paths() {
        let body = json!({
            "type": "https://onejob.dev/problems/key-reused", "status": 422,
            "title": "Idempotency key reused for a different request", "detail": "…",
            "changed": ["/prompt", "/n"], "kind_changed": false,
            "job_id": "01a22a98-4599-75a0-b1cb-7cdbcd0f53a7"
        });
        let error = error_from(
            StatusCode::UNPROCESSABLE_ENTITY,
            body.to_string().as_bytes(),
        );
        let Error::KeyReused {
            job_id,
            changed,
            kind_changed,
        } = error
        else {
            panic!("{error:?}");
        };
        assert_eq!(job_id.to_string(), "01a22a98-4599-75a0-b1cb-7cdbcd0f53a7");
        assert_eq!(changed, ["/prompt", "/n"]);
        assert!(!kind_changed);
    }

    #[test]
    fn other_problems_keep_type_title_detail_and_extensions() {
        let body = json!({
            "type": "https://onejob.dev/problems/params-invalid", "status": 400,
            "title": "Params are not valid for this kind", "detail": "params fail at /prompt",
            "errors": [{"path": "/prompt", "message": "required"}]
        });
        let error = error_from(StatusCode::BAD_REQUEST, body.to_string().as_bytes());
        assert_eq!(error.problem_slug(), Some("params-invalid"));
        let Error::Problem {
            status,
            title,
            detail,
            body,
            ..
        } = error
        else {
            panic!("{error:?}");
        };
        assert_eq!(status, 400);
        assert_eq!(title, "Params are not valid for this kind");
        assert_eq!(detail, "params fail at /prompt");
        assert_eq!(body["errors"][0]["path"], "/prompt");
    }

    #[test]
    fn a_body_that_is_not_a_problem_is_about_blank_with_its_text() {
        let error = error_from(StatusCode::BAD_GATEWAY, b"<html>bad gateway</html>");
        assert_eq!(error.status(), Some(502));
        assert_eq!(error.problem_slug(), None);
        let Error::Problem {
            problem_type,
            title,
            detail,
            ..
        } = error
        else {
            panic!("{error:?}");
        };
        assert_eq!(problem_type, "about:blank");
        assert_eq!(title, "Bad Gateway");
        assert_eq!(detail, "<html>bad gateway</html>");
    }
}
