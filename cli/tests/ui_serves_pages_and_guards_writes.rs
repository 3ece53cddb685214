//! `actum ui`, started as the user starts it and fetched over HTTP: every
//! page answers 200 with what the books hold, strings from the books come
//! back escaped (a `<script>` in a reason stays text), `/metrics` is
//! Prometheus' text format, a write without the printed token is refused
//! 403 and changes no byte, a write with it is journaled with the
//! operator's name and reason, and a write to a live database says why it
//! cannot be made.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use actum::books::{RunId, RunState, WaitStatus, digest_of};
use actum::engine::{Engine, EngineOptions};
use support::*;

const ARGS: &[u8] = b"refund 120 EUR to order-17";
const EVIL: &str = "<script>alert('boo')</script>";

/// The known database, and run `a1` waiting for an approval of `ARGS`,
/// opened with `EVIL` as its reason.
fn db_with_an_approval() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let engine = build_known(dir.path());
    wait_for_approval(&engine, "a1", ARGS, EVIL);
    engine.close().unwrap();
    dir
}

/// `actum ui` serving a directory, stopped when dropped.
struct Ui {
    child: Child,
    /// Its stdout, kept open while it serves.
    _stdout: BufReader<std::process::ChildStdout>,
    /// `http://127.0.0.1:PORT`.
    base: String,
    token: String,
}

impl Ui {
    fn start(dir: &Path) -> Ui {
        let mut child = Command::new(env!("CARGO_BIN_EXE_actum"))
            .args(["ui", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut line).unwrap();
        let url = line.split_whitespace().last().unwrap().to_string();
        let (base, token) = url.split_once("/?token=").unwrap();
        assert!(base.starts_with("http://127.0.0.1:"), "{line}");
        Ui {
            child,
            _stdout: stdout,
            base: base.to_string(),
            token: token.to_string(),
        }
    }

    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into()
    }

    /// GET `path`: the status and the body.
    fn get(&self, path: &str) -> (u16, String) {
        let mut response = Ui::agent()
            .get(format!("{}{path}", self.base))
            .call()
            .unwrap();
        let body = response.body_mut().read_to_string().unwrap();
        (response.status().as_u16(), body)
    }

    /// GET `path` with `cookie`: the body, and the cookie the answer sets.
    fn get_with_cookie(&self, path: &str, cookie: &str) -> (String, Option<String>) {
        let mut response = Ui::agent()
            .get(format!("{}{path}", self.base))
            .header("Cookie", cookie)
            .call()
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let set = response
            .headers()
            .get("set-cookie")
            .map(|v| v.to_str().unwrap().to_string());
        (response.body_mut().read_to_string().unwrap(), set)
    }

    /// POST `form` to `path`: the status and the body.
    fn post(&self, path: &str, form: &[(&str, &str)]) -> (u16, String) {
        let mut response = Ui::agent()
            .post(format!("{}{path}", self.base))
            .send_form(form.iter().copied())
            .unwrap();
        let body = response.body_mut().read_to_string().unwrap();
        (response.status().as_u16(), body)
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The form that pauses the pending run, with `token`.
fn pause_pending(token: &str) -> [(&str, &str); 5] {
    [
        ("token", token),
        ("run", runs::PENDING),
        ("action", "pause"),
        ("operator", "ann"),
        ("reason", "looks wrong"),
    ]
}

fn read_engine(db: &Path) -> Engine {
    open_retrying(|| Engine::open_read_only(db, EngineOptions::default()))
}

#[test]
fn every_page_answers_with_the_books_and_escapes_them() {
    let db = db_with_an_approval();
    let ui = Ui::start(db.path());
    let (status, runs) = ui.get("/runs");
    assert_eq!(status, 200);
    for run in ["a1", runs::DONE, runs::PENDING, runs::WAITING] {
        assert!(
            runs.contains(&format!("href=\"/runs/{run}\"")),
            "{run}: {runs}"
        );
    }
    let (status, waiting) = ui.get("/runs?state=waiting_human&limit=5");
    assert_eq!(status, 200);
    assert!(
        waiting.contains("/runs/a1") && !waiting.contains(runs::DONE),
        "{waiting}"
    );
    assert_eq!(ui.get("/runs?state=sleeping").0, 400);
    assert_eq!(ui.get("/runs?since=soon").0, 400);

    let (status, story) = ui.get("/runs/a1");
    assert_eq!(status, 200);
    assert!(story.contains("<svg id=\"timeline\""), "{story}");
    assert!(
        !story.contains(EVIL),
        "a reason reached the page unescaped: {story}"
    );
    assert!(
        story.contains("&lt;script&gt;alert(&#39;boo&#39;)&lt;/script&gt;"),
        "{story}"
    );
    assert_eq!(ui.get("/runs/no-such-run").0, 404);

    let (status, stuck) = ui.get("/stuck?older_than=1h");
    assert_eq!(status, 200);
    assert!(
        stuck.contains(runs::WAITING) && stuck.contains(runs::PAUSED),
        "{stuck}"
    );

    // Without the token the approvals are shown, their buttons are not.
    let (status, approvals) = ui.get("/approvals");
    assert_eq!(status, 200);
    assert!(approvals.contains("/runs/a1") && !approvals.contains("name=\"token\""));
    // The URL with the token sets a cookie; the cookie alone then shows them.
    let (approvals, set) = ui.get_with_cookie(&format!("/approvals?token={}", ui.token), "");
    assert!(approvals.contains("value=\"approve\""), "{approvals}");
    assert!(approvals.contains(&digest_of(ARGS).to_string()));
    let cookie = set.unwrap().split(';').next().unwrap().to_string();
    assert!(cookie.ends_with(&format!("={}", ui.token)), "{cookie}");
    let (approvals, set) = ui.get_with_cookie("/approvals", &cookie);
    assert!(
        approvals.contains("value=\"approve\"") && set.is_none(),
        "{approvals}"
    );
    let (approvals, _) = ui.get_with_cookie("/approvals", &format!("{cookie}0"));
    assert!(
        !approvals.contains("name=\"token\""),
        "a wrong cookie showed the forms"
    );

    let (status, unknown) = ui.get("/unknown");
    assert_eq!(status, 200);
    assert!(unknown.contains(UNKNOWN_KEY), "{unknown}");
}

#[test]
fn metrics_are_in_prometheus_text_format() {
    let db = db_with_an_approval();
    let ui = Ui::start(db.path());
    let (status, text) = ui.get("/metrics");
    assert_eq!(status, 200);
    assert!(
        text.contains("# TYPE actum_commits counter\nactum_commits "),
        "{text}"
    );
    assert!(text.contains("# HELP actum_wait_p95_ms "), "{text}");
    assert!(
        text.contains("actum_runs{state=\"waiting_human\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("actum_runs{state=\"completed\"} 1\n"),
        "{text}"
    );
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').unwrap();
        assert!(name.starts_with("actum_"), "{line}");
        assert!(value.parse::<u64>().is_ok(), "{line}");
    }
    let engine = read_engine(db.path());
    let commits = engine.metrics(3_600_000).unwrap().commits;
    assert!(
        text.contains(&format!("actum_commits {commits}\n")),
        "{text}"
    );
}

#[test]
fn metrics_of_a_live_engine_that_serves_its_channel_are_its_own() {
    // A wait's time is kept only in the memory of the engine that ended
    // it: a snapshot of the live database has none, the engine's own
    // metrics, served through its channel, have it.
    let dir = tempfile::tempdir().unwrap();
    let engine = std::sync::Arc::new(build_known(dir.path()));
    let run = wait_for_approval(&engine, "a1", ARGS, "a refund");
    let step = actum::books::StepId::new("refund").unwrap();
    assert!(
        engine
            .decide_approval(&run, &step, digest_of(ARGS), "ann", "finance", true, "ok")
            .unwrap()
    );
    engine.serve_operators().unwrap();
    let live = engine.metrics(3_600_000).unwrap();
    assert_eq!(live.waits_ended, 1);
    let ui = Ui::start(dir.path());
    let (status, text) = ui.get("/metrics");
    assert_eq!(status, 200, "{text}");
    for line in [
        format!("actum_commits {}\n", live.commits),
        format!("actum_waits_ended {}\n", live.waits_ended),
        format!("actum_wait_p50_ms {}\n", live.wait_p50_ms),
        "actum_runs{state=\"running\"} ".to_string(),
    ] {
        assert!(text.contains(&line), "{line} missing: {text}");
    }
    let look = engine.look().unwrap();
    for (state, count) in &look.runs_by_state {
        let line = format!("actum_runs{{state=\"{state}\"}} {count}\n");
        assert!(text.contains(&line), "{line} missing: {text}");
    }
}

#[test]
fn a_write_without_the_token_is_refused_and_changes_nothing() {
    let db = db_with_an_approval();
    let ui = Ui::start(db.path());
    let before = hash_tree(db.path());
    let digest = digest_of(ARGS).to_string();
    for token in ["", "0123456789abcdef0123456789abcdef", &ui.token[..31]] {
        let form = [
            ("token", token),
            ("run", "a1"),
            ("digest", &digest),
            ("decision", "approve"),
            ("operator", "mallory"),
            ("reason", "because"),
        ];
        assert_eq!(ui.post("/approve", &form).0, 403, "token {token:?}");
        let pause = [
            ("token", token),
            ("run", runs::PENDING),
            ("action", "pause"),
        ];
        assert_eq!(ui.post("/operate", &pause).0, 403);
        let settle = [
            ("token", token),
            ("key", UNKNOWN_KEY),
            ("outcome", "failed"),
        ];
        assert_eq!(ui.post("/reconcile", &settle).0, 403);
    }
    assert_eq!(
        hash_tree(db.path()),
        before,
        "a refused write changed a file"
    );
}

#[test]
fn writes_with_the_token_are_journaled_with_the_operator_and_reason() {
    let db = db_with_an_approval();
    let ui = Ui::start(db.path());
    let digest = digest_of(ARGS).to_string();
    let (status, said) = ui.post(
        "/approve",
        &[
            ("token", &ui.token),
            ("run", "a1"),
            ("digest", &digest[..8]),
            ("decision", "approve"),
            ("operator", "ann"),
            ("reason", EVIL),
        ],
    );
    assert_eq!(status, 200, "{said}");
    assert!(
        said.contains("step refund approved by ann as finance"),
        "{said}"
    );
    let (status, said) = ui.post("/operate", &pause_pending(&ui.token));
    assert_eq!(status, 200, "{said}");
    let settle = [
        ("token", ui.token.as_str()),
        ("key", UNKNOWN_KEY),
        ("outcome", "confirmed"),
        ("detail", "mail id 77"),
        ("operator", "ann"),
        ("reason", "the mail log"),
    ];
    let (status, said) = ui.post("/reconcile", &settle);
    assert_eq!(status, 200, "{said}");
    // A write without a name, or of an approval no longer open, does nothing.
    let nameless = [
        ("token", ui.token.as_str()),
        ("run", runs::PENDING),
        ("action", "resume"),
    ];
    assert_eq!(ui.post("/operate", &nameless).0, 400);

    {
        let engine = read_engine(db.path());
        let a1 = RunId::new("a1").unwrap();
        let wait = engine.waits(&a1).unwrap().waits.last().unwrap().clone();
        assert!(
            matches!(&wait.status, WaitStatus::Approved { approver, note } if approver == "ann" && note == EVIL),
            "{:?}",
            wait.status
        );
        let pending = RunId::new(runs::PENDING).unwrap();
        assert_eq!(
            engine.run(&pending).unwrap().unwrap().state,
            RunState::Paused
        );
        let why = engine.audit(&pending).unwrap().last().unwrap().why.clone();
        assert!(why.contains("looks wrong"), "{why}");
        let key = actum::books::EffectKey::parse(UNKNOWN_KEY).unwrap();
        assert_eq!(
            engine.effect(&key).unwrap().unwrap().status.name(),
            "confirmed"
        );
    }
    let (status, story) = ui.get("/runs/a1");
    assert_eq!(status, 200);
    assert!(
        !story.contains(EVIL) && story.contains("ann: &lt;script&gt;"),
        "{story}"
    );
    let (status, again) = ui.post(
        "/approve",
        &[
            ("token", &ui.token),
            ("run", "a1"),
            ("digest", &digest),
            ("decision", "reject"),
            ("operator", "ann"),
            ("reason", "second thoughts"),
        ],
    );
    assert_eq!(status, 409);
    assert!(again.contains("waits for no approval"), "{again}");
}

#[test]
fn a_write_to_a_live_database_says_why_it_cannot_be_made() {
    let db = db_with_an_approval();
    let ui = Ui::start(db.path());
    let live = open_retrying(|| Engine::open(db.path(), EngineOptions::default()));
    let (status, runs) = ui.get("/runs");
    assert_eq!(status, 200);
    assert!(runs.contains("live database"), "{runs}");
    let (status, said) = ui.post("/operate", &pause_pending(&ui.token));
    assert_eq!(status, 409, "{said}");
    assert!(said.contains("open in another process"), "{said}");
    let pending = RunId::new(runs::PENDING).unwrap();
    assert_eq!(
        live.run(&pending).unwrap().unwrap().state,
        RunState::Pending
    );
    live.close().unwrap();
}

#[test]
fn a_write_reaches_a_live_engine_that_serves_its_channel_once_per_form() {
    let db = db_with_an_approval();
    let ui = Ui::start(db.path());
    let live = std::sync::Arc::new(open_retrying(|| {
        Engine::open(db.path(), EngineOptions::default())
    }));
    live.serve_operators().unwrap();
    // The page draws each form with a request id of its own.
    let (page, _) = ui.get_with_cookie(&format!("/runs/{}?token={}", runs::PENDING, ui.token), "");
    let marker = "name=\"request\" value=\"";
    let at = page.find(marker).expect("the form carries a request id") + marker.len();
    let request = &page[at..at + page[at..].find('"').unwrap()];
    let mut form = pause_pending(&ui.token).to_vec();
    form.push(("request", request));
    let (status, said) = ui.post("/operate", &form);
    assert_eq!(status, 200, "{said}");
    let pending = RunId::new(runs::PENDING).unwrap();
    let paused = live.run(&pending).unwrap().unwrap();
    assert_eq!(paused.state, RunState::Paused);
    // The same form sent again (a reload after a lost answer): once.
    let (status, said) = ui.post("/operate", &form);
    assert_eq!(status, 200, "{said}");
    assert!(said.contains("carried out already"), "{said}");
    assert_eq!(live.run(&pending).unwrap().unwrap().version, paused.version);
    std::sync::Arc::into_inner(live).unwrap().close().unwrap();
}
