//! The dashboard at `/ui`: sign-in and its cookie, redirects, isolation, escaping, the
//! operators' resolve form and its CSRF protection, on both databases; and the whole
//! dashboard driven end to end in headless Chromium (`e2e/ui.test.mjs`).

use std::{path::PathBuf, process::Stdio, time::Duration};

use onejob_fake::{Behaviour, Rule};
use reqwest::{Client, RequestBuilder, Response, StatusCode, header, redirect::Policy};
use serde_json::{Value, json};

use crate::helpers::{
    Backend, Fakes, TestApp, TestDatabase, chat, create_key, json, postgres_and_sqlite_tests,
};

postgres_and_sqlite_tests!(
    signing_in_sets_an_http_only_strict_cookie_scoped_to_ui,
    the_cookie_is_secure_unless_plain_http_to_a_loopback_host,
    a_wrong_key_shows_an_error_and_sets_no_cookie,
    pages_without_a_valid_cookie_redirect_to_sign_in,
    signing_out_clears_the_cookie,
    the_json_api_does_not_take_the_cookie,
    job_pages_render_for_the_owner_and_are_404_for_anyone_else,
    a_long_event_log_shows_its_first_500_events_and_says_there_are_more,
    the_jobs_list_filters_by_state_and_kind_and_pages,
    bad_query_parameters_are_a_400_page_not_a_500,
    a_prompt_with_a_script_tag_renders_escaped,
    an_operator_resolves_an_unknown_attempt_from_the_form,
    a_result_failing_the_output_schema_is_shown_and_changes_nothing,
    the_resolve_form_is_refused_for_a_normal_key,
    the_resolve_form_is_refused_without_a_valid_csrf_proof,
    the_certificates_page_shows_every_run_with_its_validity,
    the_dashboard_works_in_headless_chromium,
);

const WITHIN: Duration = Duration::from_secs(15);

/// A client that shows redirects instead of following them.
fn browser() -> Client {
    Client::builder().redirect(Policy::none()).build().unwrap()
}

fn with_cookie(request: RequestBuilder, key: &str) -> RequestBuilder {
    request.header(header::COOKIE, format!("onejob_ui={key}"))
}

async fn page(app: &TestApp, key: &str, path: &str) -> (StatusCode, String) {
    let response = with_cookie(browser().get(app.url(path)), key)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.text().await.unwrap())
}

fn form(pairs: &[(&str, &str)]) -> String {
    let mut body = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        body.append_pair(name, value);
    }
    body.finish()
}

fn post_form(app: &TestApp, path: &str, pairs: &[(&str, &str)]) -> RequestBuilder {
    browser()
        .post(app.url(path))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form(pairs))
}

async fn sign_in(app: &TestApp, key: &str) -> Response {
    post_form(app, "/ui/login", &[("key", key)])
        .send()
        .await
        .unwrap()
}

fn set_cookie(response: &Response) -> String {
    response
        .headers()
        .get(header::SET_COOKIE)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

fn location(response: &Response) -> &str {
    response
        .headers()
        .get(header::LOCATION)
        .map_or("", |v| v.to_str().unwrap())
}

/// The CSRF token a page's forms carry.
fn csrf_of(html: &str) -> String {
    let marker = "name=\"csrf\" value=\"";
    let start = html
        .find(marker)
        .expect("the page has a form with a CSRF token")
        + marker.len();
    html[start..][..64].to_owned()
}

async fn signing_in_sets_an_http_only_strict_cookie_scoped_to_ui(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let response = sign_in(&app, &app.token).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&response), "/ui/jobs");
    let cookie = set_cookie(&response);
    let attributes: Vec<&str> = cookie.split("; ").collect();
    assert_eq!(attributes[0], format!("onejob_ui={}", app.token));
    for wanted in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(attributes.contains(&wanted), "{wanted} missing: {cookie}");
    }
    // The signed-in cookie opens the pages.
    let (status, html) = page(&app, &app.token, "/ui/jobs").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("acme / alice"), "{html}");
}

async fn the_cookie_is_secure_unless_plain_http_to_a_loopback_host(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    // Plain http to 127.0.0.1: a Secure cookie would be dropped, so it is not Secure.
    let loopback = set_cookie(&sign_in(&app, &app.token).await);
    assert!(!loopback.contains("Secure"), "{loopback}");
    for (name, value) in [
        ("host", "onejob.example.com"),
        ("x-forwarded-proto", "https"),
        ("forwarded", "proto=https;host=onejob.example.com"),
    ] {
        let response = post_form(&app, "/ui/login", &[("key", &app.token)])
            .header(name, value)
            .send()
            .await
            .unwrap();
        let cookie = set_cookie(&response);
        assert!(
            cookie.split("; ").any(|a| a == "Secure"),
            "{name}: {value} needs a Secure cookie: {cookie}"
        );
    }
}

async fn a_wrong_key_shows_an_error_and_sets_no_cookie(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let mut wrong = app.token.clone();
    let last = wrong.pop().unwrap();
    wrong.push(if last == '0' { '1' } else { '0' });
    for key in [wrong.as_str(), "not a key", "<b>oj_</b>"] {
        let response = sign_in(&app, key).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{key}");
        assert_eq!(set_cookie(&response), "", "{key}");
        let html = response.text().await.unwrap();
        assert!(html.contains("id=\"login-error\""), "{html}");
        assert!(html.contains("that API key is not valid"), "{html}");
        assert!(!html.contains("<b>oj_"), "the key is not echoed unescaped");
    }
}

async fn pages_without_a_valid_cookie_redirect_to_sign_in(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let job = app.create("k", &chat("hello")).await;
    let id = job["id"].as_str().unwrap();
    let revoked_shape = format!("oj_{}_{}", "0".repeat(16), "0".repeat(64));
    for path in [
        "/ui/jobs".to_owned(),
        format!("/ui/jobs/{id}"),
        "/ui/unknown".to_owned(),
        "/ui/races".to_owned(),
        "/ui/certificates".to_owned(),
    ] {
        let anonymous = browser().get(app.url(&path)).send().await.unwrap();
        assert_eq!(anonymous.status(), StatusCode::SEE_OTHER, "{path}");
        assert_eq!(location(&anonymous), "/ui/login", "{path}");
        for key in ["garbage", revoked_shape.as_str()] {
            let response = with_cookie(browser().get(app.url(&path)), key)
                .send()
                .await
                .unwrap();
            assert_eq!(location(&response), "/ui/login", "{path} with {key}");
        }
    }
    let post = post_form(&app, "/ui/attempts/x/resolve", &[("outcome", "failed")])
        .send()
        .await
        .unwrap();
    assert_eq!(location(&post), "/ui/login");
    // The sign-in page itself and the assets need no cookie.
    for path in ["/ui/login", "/ui/assets/ui.css", "/ui/assets/ui.js"] {
        let response = browser().get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
}

async fn signing_out_clears_the_cookie(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let response = with_cookie(post_form(&app, "/ui/logout", &[]), &app.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&response), "/ui/login");
    let cookie = set_cookie(&response);
    assert!(cookie.starts_with("onejob_ui=;"), "{cookie}");
    assert!(
        cookie.contains("Max-Age=0") && cookie.contains("Path=/ui"),
        "{cookie}"
    );
}

async fn the_json_api_does_not_take_the_cookie(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let response = with_cookie(browser().get(app.url("/v1/jobs")), &app.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

async fn job_pages_render_for_the_owner_and_are_404_for_anyone_else(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let job = app.create("k", &chat("hello")).await;
    let id = job["id"].as_str().unwrap();
    let (status, html) = page(&app, &app.token, &format!("/ui/jobs/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains(id) && html.contains("chat.completion"),
        "{html}"
    );
    assert!(
        html.contains("data-kind=\"created\""),
        "the event log: {html}"
    );
    let (_, list) = page(&app, &app.token, "/ui/jobs").await;
    assert!(list.contains(&format!("href=\"/ui/jobs/{id}\"")), "{list}");

    let bob = create_key(&*app.store, "acme", "bob", false).await;
    let operator_elsewhere = create_key(&*app.store, "umbrella", "eve", true).await;
    for other in [&bob, &operator_elsewhere] {
        let (status, html) = page(&app, other, &format!("/ui/jobs/{id}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{html}");
        assert!(!html.contains("hello"), "nothing of the job leaks");
        let (_, list) = page(&app, other, "/ui/jobs").await;
        assert!(!list.contains(id), "{list}");
    }
}

async fn a_long_event_log_shows_its_first_500_events_and_says_there_are_more(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let job = app.create("often", &chat("again")).await;
    let id = job["id"].as_str().unwrap();
    let (_, html) = page(&app, &app.token, &format!("/ui/jobs/{id}")).await;
    assert!(!html.contains("id=\"events-more\""), "a short log: {html}");
    // 505 replays: 506 events, one page of 500 and more.
    for _ in 0..505 {
        let response = app.submit("often", &chat("again")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let deadline = tokio::time::Instant::now() + WITHIN;
    while app.events(id).await.len() < 506 {
        assert!(tokio::time::Instant::now() < deadline, "replays logged");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let events = app.events(id).await;
    let (status, html) = page(&app, &app.token, &format!("/ui/jobs/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(html.matches("<tr data-kind=").count(), 500, "the first 500");
    assert!(html.contains("data-kind=\"created\""), "from the start");
    let last_shown = &events[499]["id"];
    assert!(html.contains("id=\"events-more\""), "{html}");
    assert!(
        html.contains(&format!("/v1/jobs/{id}/events?after={last_shown}")),
        "where the rest is: {html}"
    );
}

async fn the_jobs_list_filters_by_state_and_kind_and_pages(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let mut ids = Vec::new();
    for n in 0..27 {
        let job = app
            .create(&format!("k{n}"), &chat(&format!("job {n}")))
            .await;
        ids.push(job["id"].as_str().unwrap().to_owned());
    }
    let image = app
        .create(
            "img",
            &json!({"kind": "image.generate", "params": {"prompt": "a fox"}}),
        )
        .await;
    let image = image["id"].as_str().unwrap();
    let (_, first) = page(&app, &app.token, "/ui/jobs?kind=chat.completion&state=").await;
    assert!(!first.contains(image));
    assert!(first.contains(&ids[26]) && !first.contains(&ids[1]));
    assert!(first.contains("rel=\"next\""), "a next page");
    let next = format!("/ui/jobs?kind=chat.completion&#38;before={}", ids[2]);
    assert!(
        first.contains(&next),
        "the next page keeps the filter: {first}"
    );
    let (_, second) = page(
        &app,
        &app.token,
        &format!("/ui/jobs?kind=chat.completion&before={}", ids[2]),
    )
    .await;
    assert!(second.contains(&ids[0]) && second.contains(&ids[1]));
    assert!(!second.contains(&ids[2]) && !second.contains("rel=\"next\""));
    let (_, images) = page(&app, &app.token, "/ui/jobs?kind=image.generate").await;
    assert!(images.contains(image) && !images.contains(&ids[0]));
    let (_, succeeded) = page(&app, &app.token, "/ui/jobs?state=succeeded").await;
    assert!(succeeded.contains("No jobs"), "nothing ran: {succeeded}");
}

async fn bad_query_parameters_are_a_400_page_not_a_500(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    for path in [
        "/ui/jobs?state=bogus",
        "/ui/jobs?before=not-an-id",
        "/ui/jobs/not-an-id",
        "/ui/jobs?state=%FF",
    ] {
        let response = with_cookie(browser().get(app.url(path)), &app.token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
        let content_type = response.headers()[header::CONTENT_TYPE].to_str().unwrap();
        assert!(
            content_type.starts_with("text/html"),
            "{path}: {content_type}"
        );
    }
    let (status, _) = page(&app, &app.token, "/ui/no-such-page").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

async fn a_prompt_with_a_script_tag_renders_escaped(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let app = TestApp::spawn(&db).await;
    let prompt = "<script>alert(\"owned\")</script><svg onload=alert(1)>";
    let job = app.create("<b>key</b>", &chat(prompt)).await;
    let id = job["id"].as_str().unwrap();
    let (status, html) = page(&app, &app.token, &format!("/ui/jobs/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(!html.contains("<svg onload"), "{html}");
    assert!(
        html.contains("&#60;script&#62;alert(\\&#34;owned\\&#34;)&#60;/script&#62;"),
        "the prompt is shown, escaped: {html}"
    );
}

/// A running onejob whose job (owned by alice) has one attempt stuck in `unknown`: the fake
/// never answers and the chat provider cannot be asked. Returns the app, its fakes and
/// database (kept alive), the job id and the attempt id.
async fn with_an_unknown_attempt(
    backend: Backend,
) -> (TestApp, Fakes, TestDatabase, String, String) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    // Both providers hang: on a loaded machine the first send can miss its fence (400 ms
    // of attempt timeout leave 100 ms of margin) and fail over, and the next must hang too.
    for fake in [&fakes.primary, &fakes.backup] {
        fake.add_rule(Rule {
            matches: Some("mute fox".into()),
            times: None,
            behaviour: Behaviour {
                hang_before_ack: true,
                hang_after_ack: true,
                ..Default::default()
            },
        });
    }
    let app = TestApp::running(&db, &fakes, |config| {
        config.kinds[0].attempt_timeout = Duration::from_millis(400);
    })
    .await;
    let job = app.create("mute", &chat("mute fox")).await;
    let job_id = job["id"].as_str().unwrap().to_owned();
    app.wait_job(&job_id, WITHIN, |j| j["state"] == "unknown")
        .await;
    let attempt_id = unknown_attempt_of(&app, &job_id).await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    (app, fakes, db, job_id, attempt_id)
}

/// The job's attempt that is `unknown`, if one is.
async fn unknown_attempt_of(app: &TestApp, job_id: &str) -> Option<Value> {
    app.attempts(job_id)
        .await
        .into_iter()
        .find(|attempt| attempt["state"] == "unknown")
}

async fn an_operator_resolves_an_unknown_attempt_from_the_form(backend: Backend) {
    let (app, _fakes, _db, job_id, attempt_id) = with_an_unknown_attempt(backend).await;
    let operator = create_key(&*app.store, "acme", "ops", true).await;
    let (status, queue) = page(&app, &operator, "/ui/unknown").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        queue.contains(&format!("id=\"attempt-{attempt_id}\"")),
        "{queue}"
    );
    assert!(
        queue.contains(&format!("action=\"/ui/attempts/{attempt_id}/resolve\"")),
        "the operator gets the form"
    );
    let csrf = csrf_of(&queue);
    let response = with_cookie(
        post_form(
            &app,
            &format!("/ui/attempts/{attempt_id}/resolve"),
            &[
                ("csrf", &csrf),
                ("outcome", "succeeded"),
                ("result", r#"{"text": "the fox spoke after all"}"#),
                ("reason", "seen in the provider's console"),
            ],
        ),
        &operator,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let html = response.text().await.unwrap();
    assert!(
        html.contains("resolved as succeeded: won; the job is now succeeded"),
        "{html}"
    );
    assert!(
        html.contains("id=\"queue-empty\""),
        "the queue is empty now: {html}"
    );
    // The same code path as the API: the result won and the event names the operator.
    let job = app.job(&job_id).await;
    assert_eq!(job["result"], json!({"text": "the fox spoke after all"}));
    assert_eq!(job["completed_by"], json!(attempt_id));
    let operator_id = operator.split('_').nth(1).unwrap();
    let events = app.events(&job_id).await;
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "won" && e["actor"] == format!("key:{operator_id}")),
        "{events:?}"
    );
}

async fn a_result_failing_the_output_schema_is_shown_and_changes_nothing(backend: Backend) {
    let (app, _fakes, _db, job_id, attempt_id) = with_an_unknown_attempt(backend).await;
    let operator = create_key(&*app.store, "acme", "ops", true).await;
    let (_, queue) = page(&app, &operator, "/ui/unknown").await;
    let csrf = csrf_of(&queue);
    for (result, status, shown) in [
        (r#"{"nope": 1}"#, StatusCode::BAD_REQUEST, "/text"),
        (
            "{not json",
            StatusCode::BAD_REQUEST,
            "the result is not valid JSON",
        ),
        (
            "",
            StatusCode::BAD_REQUEST,
            "a succeeded resolution carries the attempt",
        ),
    ] {
        let response = with_cookie(
            post_form(
                &app,
                &format!("/ui/attempts/{attempt_id}/resolve"),
                &[
                    ("csrf", &csrf),
                    ("outcome", "succeeded"),
                    ("result", result),
                ],
            ),
            &operator,
        )
        .send()
        .await
        .unwrap();
        assert_eq!(response.status(), status, "{result}");
        let html = response.text().await.unwrap();
        assert!(html.contains("was not resolved"), "{html}");
        assert!(html.contains(shown), "{shown} in {html}");
        // The attempt is still queued, and its form keeps what was typed (escaped).
        assert!(html.contains(&format!("id=\"attempt-{attempt_id}\"")));
        if !result.is_empty() {
            let typed = result.replace('"', "&#34;");
            assert!(html.contains(&typed), "{typed} kept in {html}");
        }
    }
    let still = unknown_attempt_of(&app, &job_id).await;
    assert_eq!(still.unwrap()["id"], attempt_id.as_str(), "still unknown");
    assert_eq!(app.job(&job_id).await["state"], "unknown");
}

async fn the_resolve_form_is_refused_for_a_normal_key(backend: Backend) {
    let (app, _fakes, _db, job_id, attempt_id) = with_an_unknown_attempt(backend).await;
    // alice owns the job: she sees it queued, without a form.
    let (status, queue) = page(&app, &app.token, "/ui/unknown").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        queue.contains(&format!("id=\"attempt-{attempt_id}\"")),
        "{queue}"
    );
    assert!(!queue.contains("/resolve\""), "no form for a normal key");
    let csrf = csrf_of(&queue);
    let response = with_cookie(
        post_form(
            &app,
            &format!("/ui/attempts/{attempt_id}/resolve"),
            &[("csrf", &csrf), ("outcome", "failed")],
        ),
        &app.token,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let html = response.text().await.unwrap();
    assert!(html.contains("needs an operator key"), "{html}");
    let still = unknown_attempt_of(&app, &job_id).await;
    assert_eq!(still.unwrap()["id"], attempt_id.as_str(), "still unknown");
}

async fn the_resolve_form_is_refused_without_a_valid_csrf_proof(backend: Backend) {
    let (app, _fakes, _db, job_id, attempt_id) = with_an_unknown_attempt(backend).await;
    let operator = create_key(&*app.store, "acme", "ops", true).await;
    let other_operator = create_key(&*app.store, "acme", "ops2", true).await;
    let (_, theirs) = page(&app, &other_operator, "/ui/unknown").await;
    let (_, mine) = page(&app, &operator, "/ui/unknown").await;
    let path = format!("/ui/attempts/{attempt_id}/resolve");
    // No token, a made-up one, another session's, and the right one from another origin.
    let tries = [
        (None, None),
        (Some("0".repeat(64)), None),
        (Some(csrf_of(&theirs)), None),
        (Some(csrf_of(&mine)), Some("http://evil.example")),
    ];
    for (token, origin) in tries {
        let mut pairs = vec![("outcome", "failed")];
        if let Some(token) = &token {
            pairs.push(("csrf", token));
        }
        let mut request = with_cookie(post_form(&app, &path, &pairs), &operator);
        if let Some(origin) = origin {
            request = request.header(header::ORIGIN, origin);
        }
        let response = request.send().await.unwrap();
        assert_eq!(
            response.status(),
            StatusCode::FORBIDDEN,
            "{token:?} {origin:?}"
        );
        let html = response.text().await.unwrap();
        assert!(
            html.contains("CSRF") || html.contains("another origin"),
            "{html}"
        );
    }
    let still = unknown_attempt_of(&app, &job_id).await;
    assert_eq!(still.unwrap()["id"], attempt_id.as_str(), "still unknown");
}

async fn the_certificates_page_shows_every_run_with_its_validity(backend: Backend) {
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    let app = TestApp::running(&db, &fakes, |_| {}).await;
    let operator = create_key(&*app.store, "acme", "ops", true).await;
    let (status, html) = page(&app, &operator, "/ui/certificates").await;
    assert_eq!(status, StatusCode::OK);
    // TestApp::running certified fake-backup for both kinds.
    assert_eq!(html.matches("data-valid=\"true\"").count(), 2, "{html}");
    assert!(html.contains("fake-backup") && html.contains("image.generate"));
    assert!(
        html.contains("href=\"/ui/certificates\""),
        "operators see the link"
    );
    assert!(!html.contains("rel=\"next\""), "one page: {html}");
    let (status, html) = page(&app, &operator, "/ui/certificates?before=x").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{html}");

    // Certificates describe the deployment's providers: not for a normal key, whose
    // navigation does not offer them either.
    let (status, html) = page(&app, &app.token, "/ui/certificates").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{html}");
    assert!(
        html.contains("operator key") && !html.contains("fake-backup"),
        "{html}"
    );
    let (_, jobs) = page(&app, &app.token, "/ui/jobs").await;
    assert!(!jobs.contains("href=\"/ui/certificates\""), "{jobs}");
}

async fn get_json(app: &TestApp, token: &str, path: &str) -> Value {
    let (status, body) = json(app.get_as(token, path).send().await.unwrap()).await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// Where the browser test's screenshots go.
fn artifacts(backend: Backend) -> PathBuf {
    let root = std::env::var_os("ONEJOB_ARTIFACTS")
        .map_or_else(|| repository().join("target/ui-artifacts"), PathBuf::from);
    root.join(format!("{backend:?}").to_lowercase())
}

fn repository() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Fails (never skips) when what the browser test needs is not installed.
fn require_browser_tooling() -> (PathBuf, PathBuf) {
    let chromium = PathBuf::from(
        std::env::var("ONEJOB_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned()),
    );
    let e2e = repository().join("e2e");
    let install = "install them with `apt-get install -y chromium` (Debian's package) and \
                   `npm ci --prefix e2e` at the repository root; .ci/run does both";
    assert!(
        chromium.is_file(),
        "the browser test needs Chromium at {}: {install}",
        chromium.display()
    );
    assert!(
        e2e.join("node_modules/playwright-core/package.json")
            .is_file(),
        "the browser test needs e2e/node_modules (playwright-core): {install}"
    );
    assert!(
        std::process::Command::new("node")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        "the browser test needs Node.js (`node`) on PATH: {install}"
    );
    (chromium, e2e)
}

async fn the_dashboard_works_in_headless_chromium(backend: Backend) {
    let (chromium, e2e) = require_browser_tooling();
    let db = TestDatabase::create(backend).await;
    let fakes = Fakes::spawn().await;
    // A hedge race: the primary is sent first and answers last; the hedge on the backup
    // answers first and wins, so the primary's result is discarded.
    let rule = |matches: &str, behaviour: Behaviour| Rule {
        matches: Some(matches.into()),
        times: None,
        behaviour,
    };
    fakes.primary.add_rule(rule(
        "fox race",
        Behaviour {
            run_ms: 1000,
            output: Some(json!({"text": "primary, late"})),
            ..Default::default()
        },
    ));
    fakes.backup.add_rule(rule(
        "fox race",
        Behaviour {
            run_ms: 50,
            output: Some(json!({"text": "backup, early"})),
            ..Default::default()
        },
    ));
    // An attempt that is never answered: unknown once its timeout passes.
    fakes.primary.add_rule(rule(
        "mute fox",
        Behaviour {
            hang_before_ack: true,
            hang_after_ack: true,
            ..Default::default()
        },
    ));
    let app = TestApp::running(&db, &fakes, |config| {
        config.kinds[0].hedge_after = Some(Duration::from_millis(200));
        config.kinds[0].attempt_timeout = Duration::from_secs(4);
    })
    .await;
    let operator = create_key(&*app.store, "acme", "ops", true).await;
    let mut ids = Vec::new();
    for (key, prompt) in [
        ("plain", "Describe a <b>red</b> fox."),
        ("race", "Write a haiku about a fox race."),
        ("mute", "Describe the mute fox."),
    ] {
        let (status, job) = json(
            app.submit_as(&operator, key, &chat(prompt))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 201, "{job}");
        ids.push(job["id"].as_str().unwrap().to_owned());
    }
    let [plain, race, unknown] = &ids[..] else {
        unreachable!("three jobs")
    };
    // Ready when the plain job succeeded, the unknown one is unknown, and the race is decided
    // (the hedge won, the primary's late answer was discarded).
    let deadline = tokio::time::Instant::now() + WITHIN;
    let unknown_attempt = loop {
        let plain_job = get_json(&app, &operator, &format!("/v1/jobs/{plain}")).await;
        let stuck = get_json(&app, &operator, &format!("/v1/jobs/{unknown}/attempts")).await;
        let raced = get_json(&app, &operator, &format!("/v1/jobs/{race}/attempts")).await;
        let states: Vec<&Value> = raced["attempts"]
            .as_array()
            .map(|a| a.iter().map(|a| &a["state"]).collect())
            .unwrap_or_default();
        if plain_job["state"] == "succeeded"
            && stuck["attempts"][0]["state"] == "unknown"
            && states == [&json!("discarded"), &json!("succeeded")]
        {
            assert_eq!(raced["attempts"][1]["hedge"], true);
            break stuck["attempts"][0]["id"].as_str().unwrap().to_owned();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not ready: {plain_job} {stuck} {raced}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let artifacts = artifacts(backend);
    std::fs::create_dir_all(&artifacts).unwrap();
    let mut node = tokio::process::Command::new("node");
    node.arg("--test")
        .arg("ui.test.mjs")
        .current_dir(&e2e)
        .env("ONEJOB_URL", app.url(""))
        .env("ONEJOB_KEY", &operator)
        .env("ONEJOB_RACE_JOB", race)
        .env("ONEJOB_UNKNOWN_JOB", unknown)
        .env("ONEJOB_UNKNOWN_ATTEMPT", &unknown_attempt)
        .env("ONEJOB_CHROMIUM", &chromium)
        .env("ONEJOB_ARTIFACTS", &artifacts)
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(180), node.output())
        .await
        .expect("the browser test finishes within 3 minutes")
        .expect("node starts");
    let report = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "e2e/ui.test.mjs failed:\n{report}");
    assert!(
        artifacts.join("job-page.png").is_file(),
        "the job page screenshot was saved in {}:\n{report}",
        artifacts.display()
    );
    // What the browser did went through the real API: the unknown attempt won.
    let job = get_json(&app, &operator, &format!("/v1/jobs/{unknown}")).await;
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(job["completed_by"], json!(unknown_attempt));
}
