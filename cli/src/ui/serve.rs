//! The server: routes, the token check, and the bridge from async handlers
//! to the engine's blocking reads and writes (`spawn_blocking`).
//!
//! GET pages answer anyone who can reach the address; a GET with the right
//! `?token=` sets a cookie so the page keeps it, and pages then carry it in
//! a hidden field of every form. POST (a write) needs the token in its
//! form: the cookie alone is not enough, so another site's form cannot
//! write through a browser that has the cookie.
//!
//! **Invariant:** a POST whose form lacks the right token is answered 403
//! before anything is opened.

use std::path::PathBuf;
use std::sync::Arc;

use actum::books::{OperatorAction, RunId};
use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use super::{act, metrics, pages, story, token};
use crate::args::Found;
use crate::failure::CliError;
use crate::live::{Reading, open_to_read};
use crate::text::parse_duration_ms;

/// What every request shares: the directory and the token.
pub struct App {
    dir: PathBuf,
    token: String,
    /// The cookie's name: one per port, so two pages on one host keep
    /// their own tokens.
    cookie: String,
    /// Held through each write: two writes from the page at once would
    /// otherwise find the directory locked by each other.
    writing: std::sync::Mutex<()>,
}

impl App {
    /// The page of `dir`, writable with `token`, served on `port`.
    pub fn new(dir: PathBuf, token: String, port: u16) -> App {
        assert!(!token.is_empty(), "a token is never empty");
        App {
            dir,
            token,
            cookie: format!("actum_ui_token_{port}"),
            writing: std::sync::Mutex::new(()),
        }
    }

    /// The token writes need.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The token, if the request's query or cookie carries the right one;
    /// and whether the cookie must be set.
    fn known(&self, query: &pages::Query, headers: &HeaderMap) -> (Option<String>, bool) {
        if query
            .get("token")
            .is_some_and(|t| token::matches(&self.token, t))
        {
            return (Some(self.token.clone()), true);
        }
        let kept = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .any(|(name, value)| name == self.cookie && token::matches(&self.token, value));
        (kept.then(|| self.token.clone()), false)
    }
}

/// The routes.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(runs))
        .route("/runs", get(runs))
        .route("/runs/{run}", get(run))
        .route("/stuck", get(stuck))
        .route(
            "/approvals",
            get(|s, q, h| engine_page(s, q, h, pages::approvals)),
        )
        .route(
            "/unknown",
            get(|s, q, h| engine_page(s, q, h, pages::unknown)),
        )
        .route("/metrics", get(metrics))
        .route("/approve", post(approve))
        .route("/reconcile", post(reconcile))
        .route("/operate", post(operate))
        .with_state(app)
}

/// Why a page cannot be shown: a request the page cannot read (its status
/// and why), or the engine's error (500, the message naming the directory).
enum Unshown {
    Bad(StatusCode, String),
    Engine(actum::Error),
}

impl From<actum::Error> for Unshown {
    fn from(error: actum::Error) -> Unshown {
        Unshown::Engine(error)
    }
}

/// Renders a page from a read of the database, off the async threads;
/// sets the token's cookie when the query brought it.
async fn read_page(
    app: Arc<App>,
    query: pages::Query,
    headers: HeaderMap,
    render: impl FnOnce(&Reading, &pages::Query, Option<&str>) -> Result<String, Unshown>
    + Send
    + 'static,
) -> Response {
    let (token, set_cookie) = app.known(&query, &headers);
    let cookie = format!(
        "{}={}; Path=/; HttpOnly; SameSite=Strict",
        app.cookie, app.token
    );
    let shown = tokio::task::spawn_blocking(move || {
        let reading = open_to_read(&app.dir).map_err(|e| engine_failed(&app, e))?;
        render(&reading, &query, token.as_deref()).map_err(|unshown| match unshown {
            Unshown::Bad(status, message) => (status, message),
            Unshown::Engine(e) => engine_failed(&app, e),
        })
    })
    .await
    .unwrap_or_else(|e| Err((StatusCode::INTERNAL_SERVER_ERROR, e.to_string())));
    let mut response = match shown {
        Ok(html) => Html(html).into_response(),
        Err((status, message)) => {
            (status, Html(pages::failed("Cannot show this", &message))).into_response()
        }
    };
    if set_cookie && let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// An engine error as the page says it.
fn engine_failed(app: &App, error: actum::Error) -> (StatusCode, String) {
    let message = match CliError::engine(&app.dir, error) {
        CliError::Failed { message, .. } => message,
        CliError::OutputClosed => "the read was interrupted".to_string(),
    };
    (StatusCode::INTERNAL_SERVER_ERROR, message)
}

/// A request the page cannot read: 400, and why.
fn unreadable(why: String) -> Unshown {
    Unshown::Bad(StatusCode::BAD_REQUEST, why)
}

async fn runs(
    State(app): State<Arc<App>>,
    Query(q): Query<pages::Query>,
    h: HeaderMap,
) -> Response {
    read_page(app, q, h, |reading, query, token| {
        let filter = pages::filter(query).map_err(unreadable)?;
        let listing = crate::runs::list(&reading.engine, &filter)?;
        Ok(pages::runs(
            &listing,
            query,
            &reading.as_of(),
            token.is_some(),
        ))
    })
    .await
}

async fn run(
    State(app): State<Arc<App>>,
    Path(run): Path<String>,
    Query(q): Query<pages::Query>,
    h: HeaderMap,
) -> Response {
    read_page(app, q, h, move |reading, _, token| {
        let missing = |why: String| Unshown::Bad(StatusCode::NOT_FOUND, why);
        let id = RunId::new(run.as_str()).map_err(|e| missing(e.to_string()))?;
        let mut story = crate::show::gather(&reading.engine, &id)?
            .ok_or_else(|| missing(format!("no run {id} (the runs page lists them)")))?;
        story.postgres.clone_from(&reading.postgres);
        let approval = crate::answer::open_approval(&reading.engine, &id)?;
        Ok(story::run_page(
            &story,
            approval.as_ref().map(|(_, d, _)| d),
            token,
        ))
    })
    .await
}

async fn stuck(
    State(app): State<Arc<App>>,
    Query(q): Query<pages::Query>,
    h: HeaderMap,
) -> Response {
    read_page(app, q, h, |reading, query, token| {
        let older_than = query
            .get("older_than")
            .map_or("1h", |v| v.trim())
            .to_string();
        let older_than_ms = parse_duration_ms(&older_than).map_err(unreadable)?;
        let rows = crate::stuck::gather(&reading.engine, older_than_ms)?;
        Ok(pages::stuck(
            &rows,
            &older_than,
            &reading.as_of(),
            token.is_some(),
        ))
    })
    .await
}

/// A page drawn from the engine alone (`pages::approvals`,
/// `pages::unknown`).
type EnginePage = fn(&actum::engine::Engine, &str, Option<&str>) -> actum::Result<String>;

/// The handler of the page `draw` draws.
async fn engine_page(
    State(app): State<Arc<App>>,
    Query(q): Query<pages::Query>,
    h: HeaderMap,
    draw: EnginePage,
) -> Response {
    read_page(app, q, h, move |reading, _, token| {
        Ok(draw(&reading.engine, &reading.as_of(), token)?)
    })
    .await
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    let shown = tokio::task::spawn_blocking(move || {
        metrics::of_dir(&app.dir).map_err(|e| engine_failed(&app, e))
    })
    .await
    .unwrap_or_else(|e| Err((StatusCode::INTERNAL_SERVER_ERROR, e.to_string())));
    match shown {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err((status, message)) => (status, message).into_response(),
    }
}

/// The fields every write's form carries.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Who {
    token: String,
    /// The request's id the form was drawn with (one is made up if empty).
    request: String,
    operator: String,
    reason: String,
}

impl Who {
    /// Who asks, why, and under which request id.
    fn as_by(&self) -> act::By {
        act::By {
            request: crate::operator::made_up_id(Some(&self.request)),
            operator: self.operator.clone(),
            reason: self.reason.clone(),
        }
    }
}

/// `/approve`'s form.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ApproveForm {
    #[serde(flatten)]
    who: Who,
    run: String,
    digest: String,
    /// `approve` or `reject`.
    decision: String,
}

/// `/reconcile`'s form.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ReconcileForm {
    #[serde(flatten)]
    who: Who,
    key: String,
    /// `confirmed` or `failed`.
    outcome: String,
    /// The receipt, or the error.
    detail: String,
}

/// `/operate`'s form.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct OperateForm {
    #[serde(flatten)]
    who: Who,
    run: String,
    /// `pause`, `resume` or `cancel`.
    action: String,
}

/// The answer to a write that cannot go ahead: its form lacks the right
/// token (403), or an operator's name or a reason (400); `None` if it can.
fn refuse(app: &App, who: &Who) -> Option<Response> {
    if !token::matches(&app.token, &who.token) {
        let said = pages::failed(
            "Forbidden",
            "This write needs the token `actum ui` printed at start: open the URL it printed. \
             Nothing was changed.",
        );
        return Some((StatusCode::FORBIDDEN, Html(said)).into_response());
    }
    if who.operator.trim().is_empty() || who.reason.trim().is_empty() {
        return Some(bad_request(
            "Give your name and a reason: both are journaled with the change.",
        ));
    }
    None
}

/// A 400 answer that says why nothing was changed.
fn bad_request(message: &str) -> Response {
    let said = pages::failed("Nothing changed", message);
    (StatusCode::BAD_REQUEST, Html(said)).into_response()
}

/// Runs `write` off the async threads, one write at a time; the page says
/// what it did, or why it did nothing.
async fn write(
    app: Arc<App>,
    run: Option<String>,
    write: impl FnOnce() -> act::Acted + Send + 'static,
) -> Response {
    let acted = tokio::task::spawn_blocking(move || {
        // A write that panicked poisoned nothing the next one reads.
        let _one = app.writing.lock().unwrap_or_else(|p| p.into_inner());
        write()
    })
    .await
    .unwrap_or_else(|e| Err(format!("Nothing was changed: {e}")));
    let status = if acted.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::CONFLICT
    };
    (status, Html(pages::acted(&acted, run.as_deref()))).into_response()
}

/// A form's choice among `choices`, or why it is none of them.
fn choose<T: Copy>(given: &str, what: &str, choices: &[(&str, T)]) -> Result<T, String> {
    choices
        .iter()
        .find(|(name, _)| *name == given)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            format!("{what} {given:?}: choose one of {}", names.join(", "))
        })
}

/// The form's choice among `choices` (`given`, the `what` field), if the
/// write may go ahead (`refuse`); else the answer that says why not.
fn admit<T: Copy>(
    app: &App,
    who: &Who,
    (what, given): (&str, &str),
    choices: &[(&str, T)],
) -> Result<T, Box<Response>> {
    if let Some(refused) = refuse(app, who) {
        return Err(Box::new(refused));
    }
    choose(given, what, choices).map_err(|why| Box::new(bad_request(&why)))
}

async fn approve(State(app): State<Arc<App>>, Form(f): Form<ApproveForm>) -> Response {
    let decisions = [("approve", true), ("reject", false)];
    let approve = match admit(&app, &f.who, ("decision", &f.decision), &decisions) {
        Ok(approve) => approve,
        Err(refused) => return *refused,
    };
    let (dir, run) = (app.dir.clone(), f.run.clone());
    write(app.clone(), Some(f.run.clone()), move || {
        act::approve(&dir, &run, &f.digest, approve, &f.who.as_by())
    })
    .await
}

async fn reconcile(State(app): State<Arc<App>>, Form(f): Form<ReconcileForm>) -> Response {
    let outcomes = [("confirmed", Found::Confirmed), ("failed", Found::Failed)];
    let found = match admit(&app, &f.who, ("outcome", &f.outcome), &outcomes) {
        Ok(found) => found,
        Err(refused) => return *refused,
    };
    let run = f.key.split('/').next().map(str::to_string);
    let dir = app.dir.clone();
    write(app.clone(), run, move || {
        act::reconcile(&dir, &f.key, found, &f.detail, &f.who.as_by())
    })
    .await
}

async fn operate(State(app): State<Arc<App>>, Form(f): Form<OperateForm>) -> Response {
    let actions = [
        ("pause", OperatorAction::Pause),
        ("resume", OperatorAction::Resume),
        ("cancel", OperatorAction::Cancel),
    ];
    let action = match admit(&app, &f.who, ("action", &f.action), &actions) {
        Ok(action) => action,
        Err(refused) => return *refused,
    };
    let (dir, run) = (app.dir.clone(), f.run.clone());
    write(app.clone(), Some(f.run.clone()), move || {
        act::operate(&dir, &run, action, &f.who.as_by())
    })
    .await
}
