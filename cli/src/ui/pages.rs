//! The list pages: runs (with `actum runs`' filters), stuck runs (as
//! `actum stuck`), approvals waiting for a person, and effects whose
//! outcome is unknown; and the page that answers a write.
//!
//! **Invariant:** each page shows what the shared gathering returned, in
//! its order, every string escaped; a filter the page cannot read is
//! refused with what it takes, as the command line refuses it.

use std::collections::BTreeMap;

use actum::books::RunId;
use actum::engine::Engine;

use super::html::{approval_form, esc, page, reconcile_form, run_link, table, url, when};
use crate::args::parse_state;
use crate::runs::{Filter, Listing};
use crate::text::{fmt_duration, parse_duration_ms};

/// The page's query: name to value, as the browser sent it.
pub type Query = BTreeMap<String, String>;

/// A query value, if given and not empty.
fn given<'a>(query: &'a Query, name: &str) -> Option<&'a str> {
    query.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// The runs page's filters from its query, or why they cannot be read.
pub fn filter(query: &Query) -> Result<Filter, String> {
    let limit = match given(query, "limit") {
        None => 50,
        Some(text) => text
            .parse::<u16>()
            .ok()
            .filter(|l| (1..=10_000).contains(l))
            .ok_or_else(|| format!("limit {text:?}: give a number from 1 to 10000"))?,
    };
    Ok(Filter {
        state: given(query, "state").map(parse_state).transpose()?,
        kind: given(query, "kind").map(str::to_string),
        version: given(query, "version").map(str::to_string),
        since_ms: given(query, "since").map(parse_duration_ms).transpose()?,
        limit,
        after: given(query, "after")
            .map(RunId::new)
            .transpose()
            .map_err(|e| format!("after: {e}"))?,
    })
}

/// A text field of the filter form, holding what the query gave.
fn field(query: &Query, name: &str, hint: &str) -> String {
    format!(
        "<label>{name} <input type=\"text\" name=\"{name}\" value=\"{}\" placeholder=\"{}\"></label> ",
        esc(given(query, name).unwrap_or("")),
        esc(hint)
    )
}

/// The runs page.
pub fn runs(listing: &Listing, query: &Query, as_of: &str, can_write: bool) -> String {
    let chosen = given(query, "state").unwrap_or("");
    let mut states = String::from("<option value=\"\">any</option>");
    for state in actum::books::RunState::ALL {
        let name = state.name();
        let selected = if name == chosen { " selected" } else { "" };
        states.push_str(&format!("<option{selected}>{name}</option>"));
    }
    let form = format!(
        "<form method=\"get\" action=\"/runs\"><label>state <select name=\"state\">{states}\
         </select></label> {}{}{}{}<button>Filter</button></form>",
        field(query, "kind", "agent kind"),
        field(query, "version", "version"),
        field(query, "since", "2h, 7d"),
        field(query, "limit", "50"),
    );
    let rows: Vec<Vec<String>> = listing
        .runs
        .iter()
        .map(|r| {
            vec![
                run_link(&r.run),
                esc(r.state),
                esc(&r.agent),
                when(r.created_ms),
                format!(
                    "{} ago",
                    fmt_duration(listing.now_ms.saturating_sub(r.updated_ms))
                ),
                esc(r.held_by.as_deref().unwrap_or("-")),
            ]
        })
        .collect();
    let listed = if rows.is_empty() {
        "<p>No run matches.</p>".to_string()
    } else {
        table(
            &["Run", "State", "Agent", "Created", "Last change", "Held by"],
            &rows,
        )
    };
    let next = listing
        .next_after
        .as_deref()
        .map_or_else(String::new, |after| {
            let mut kept: Query = query.clone();
            kept.insert("after".into(), after.to_string());
            kept.remove("token");
            let link: Vec<String> = kept
                .iter()
                .map(|(k, v)| format!("{}={}", url(k), url(v)))
                .collect();
            format!(
                "<p><a href=\"/runs?{}\">Next page</a></p>",
                esc(&link.join("&"))
            )
        });
    let body = format!("<p class=\"asof\">{}</p>{form}{listed}{next}", esc(as_of));
    page("Runs", can_write, &body)
}

/// The stuck page: runs stuck for `older_than_ms` or longer.
pub fn stuck(rows: &[crate::stuck::Row], older_than: &str, as_of: &str, can_write: bool) -> String {
    let form = format!(
        "<form method=\"get\" action=\"/stuck\"><label>stuck for at least <input type=\"text\" \
         name=\"older_than\" value=\"{}\"></label> <button>Show</button></form>",
        esc(older_than)
    );
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                run_link(&r.run),
                esc(r.kind),
                esc(&r.at),
                esc(&fmt_duration(r.for_ms)),
                when(r.since_ms),
                esc(&r.what),
            ]
        })
        .collect();
    let body = format!(
        "<p class=\"asof\">{}</p>{form}<p>{} run(s) stuck for {older_than} or longer.</p>{}",
        esc(as_of),
        rows.len(),
        table(
            &["Run", "Kind", "Step or effect", "For", "Since", "What"],
            &cells
        ),
        older_than = esc(older_than)
    );
    page("Stuck runs", can_write, &body)
}

/// The approvals page: every approval a run waits for, with its buttons.
pub fn approvals(engine: &Engine, as_of: &str, token: Option<&str>) -> actum::Result<String> {
    let pending = crate::answer::pending_approvals(engine)?;
    let now_ms = engine.clock().now_ms();
    let rows: Vec<Vec<String>> = pending
        .iter()
        .map(|p| {
            vec![
                run_link(p.run.as_str()),
                esc(p.step.as_str()),
                esc(&p.role),
                format!(
                    "<code title=\"{}\">{}</code>",
                    esc(&p.digest),
                    esc(p.digest.get(..8).unwrap_or(&p.digest))
                ),
                esc(&fmt_duration(now_ms.saturating_sub(p.opened_ms))),
                p.deadline_ms.map_or_else(|| "-".to_string(), when),
                approval_form(token, p.run.as_str(), &p.digest),
            ]
        })
        .collect();
    let body = format!(
        "<p class=\"asof\">{}</p><p>{} approval(s) waiting.</p>{}",
        esc(as_of),
        pending.len(),
        table(
            &[
                "Run",
                "Step",
                "Role",
                "Arguments",
                "Waiting",
                "Deadline",
                "Decide"
            ],
            &rows
        )
    );
    Ok(page("Approvals", token.is_some(), &body))
}

/// The unknown effects page: each effect whose outcome is unknown, with
/// a form to reconcile it.
pub fn unknown(engine: &Engine, as_of: &str, token: Option<&str>) -> actum::Result<String> {
    let rows = crate::stuck::gather(engine, 0)?;
    let unknown: Vec<&crate::stuck::Row> = rows.iter().filter(|r| r.kind == "unknown").collect();
    let cells: Vec<Vec<String>> = unknown
        .iter()
        .map(|r| {
            vec![
                run_link(&r.run),
                format!("<code>{}</code>", esc(&r.at)),
                when(r.since_ms),
                esc(&fmt_duration(r.for_ms)),
                reconcile_form(token, &r.at),
            ]
        })
        .collect();
    let body = format!(
        "<p class=\"asof\">{}</p><p>{} effect(s) whose outcome is unknown: find out from the \
         tool whether each act happened, then say so here.</p>{}",
        esc(as_of),
        unknown.len(),
        table(&["Run", "Effect", "Since", "For", "Reconcile"], &cells)
    );
    Ok(page("Unknown effects", token.is_some(), &body))
}

/// The answer to a write: what it did, or why it did nothing, and a link
/// back to the run.
pub fn acted(acted: &super::act::Acted, run: Option<&str>) -> String {
    let (title, class, text) = match acted {
        Ok(text) => ("Done", "ok", text),
        Err(text) => ("Nothing changed", "refused", text),
    };
    let lines: Vec<String> = text.lines().map(esc).collect();
    let back = run.map_or_else(String::new, |r| {
        format!("<p>Back to run {}</p>", run_link(r))
    });
    let body = format!(
        "<p class=\"{class}\" id=\"result\">{}</p>{back}",
        lines.join("<br>")
    );
    page(title, true, &body)
}

/// A page that says why the request could not be answered.
pub fn failed(title: &str, message: &str) -> String {
    let lines: Vec<String> = message.lines().map(esc).collect();
    page(
        title,
        true,
        &format!("<p class=\"refused\">{}</p>", lines.join("<br>")),
    )
}
