//! OpenAPI links (3.1 §4.8.20): how the ids one operation answers feed the next ones. A
//! client generator, and schemathesis's stateful phase, follow them from a submitted job to
//! reading, listing, cancelling and retrying it, and from the attempt listing to resolving.

use utoipa::{
    Modify,
    openapi::{OpenApi, RefOr, link::LinkBuilder},
};

/// Adds the links to [`super::openapi::ApiDoc`].
pub struct Links;

/// One link: its name, the operation it leads to, that operation's parameter, and the
/// runtime expression that fills it.
type Link = (&'static str, &'static str, &'static str, &'static str);

/// `(path, method, statuses, links)`.
const LINKS: &[(&str, &str, &[&str], &[Link])] = &[
    (
        "/v1/jobs",
        "post",
        &["200", "201"],
        &[
            ("GetJob", "getJob", "id", "$response.body#/id"),
            ("GetAttempts", "listJobAttempts", "id", "$response.body#/id"),
            ("GetEvents", "listJobEvents", "id", "$response.body#/id"),
            ("Cancel", "cancelJob", "id", "$response.body#/id"),
            ("Retry", "retryJob", "id", "$response.body#/id"),
        ],
    ),
    (
        "/v1/jobs/{id}/attempts",
        "get",
        &["200"],
        &[(
            "Resolve",
            "resolveAttempt",
            "id",
            "$response.body#/attempts/0/id",
        )],
    ),
    (
        "/v1/attempts",
        "get",
        &["200"],
        &[(
            "Resolve",
            "resolveAttempt",
            "id",
            "$response.body#/attempts/0/id",
        )],
    ),
];

impl Modify for Links {
    fn modify(&self, openapi: &mut OpenApi) {
        for (path, method, statuses, links) in LINKS {
            let Some(item) = openapi.paths.paths.get_mut(*path) else {
                continue;
            };
            let operation = match *method {
                "post" => item.post.as_mut(),
                _ => item.get.as_mut(),
            };
            let Some(operation) = operation else {
                continue;
            };
            for status in *statuses {
                let Some(RefOr::T(response)) = operation.responses.responses.get_mut(*status)
                else {
                    continue;
                };
                for (name, operation_id, parameter, expression) in *links {
                    response.links.insert(
                        (*name).to_owned(),
                        RefOr::T(
                            LinkBuilder::new()
                                .operation_id(*operation_id)
                                .parameter(*parameter, *expression)
                                .build(),
                        ),
                    );
                }
            }
        }
    }
}
