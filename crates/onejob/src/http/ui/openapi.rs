//! The dashboard's routes in the OpenAPI document: HTML pages under the `dashboard` tag,
//! authenticated by the sign-in cookie (an API key scheme `in: cookie`, `dashboard_cookie`).
//! [`Dashboard`] merges them into [`crate::http::openapi::ApiDoc`].

use utoipa::{
    Modify, OpenApi,
    openapi::security::{ApiKey, ApiKeyValue, SecurityScheme},
};

use super::{certificates, cookie, job, jobs, login, races, unknown};

#[derive(OpenApi)]
#[openapi(
    paths(
        super::home,
        login::form,
        login::submit,
        login::logout,
        jobs::list,
        job::show,
        unknown::queue,
        unknown::resolve,
        races::list,
        certificates::list,
    ),
    tags((
        name = "dashboard",
        description = "The server-rendered dashboard (HTML). Sign in with an API key at \
                       /ui/login; the key is kept in the `onejob_ui` cookie. The JSON API \
                       does not take the cookie."
    ))
)]
struct DashboardDoc;

/// Adds the dashboard's routes and its cookie scheme to the API description.
pub struct Dashboard;

impl Modify for Dashboard {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        openapi.merge(DashboardDoc::openapi());
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "dashboard_cookie",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                cookie::NAME,
                "The dashboard's sign-in cookie: the API key given to POST /ui/login \
                 (HttpOnly, SameSite=Strict, Path=/ui).",
            ))),
        );
    }
}
