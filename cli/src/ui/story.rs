//! A run's page: its story as `actum show` gathers it (`show::gather`),
//! with its states, steps and waits on a time line drawn in inline SVG,
//! the buttons for the approval it waits for, a reconcile form for each
//! effect whose outcome is unknown, and pause, resume and cancel.
//!
//! **Invariant:** every mark on the time line is a span the books hold
//! (an intent to its outcome, a wait's opening to its end, one state to
//! the next), drawn to now when it has not ended; nothing is inferred.

use std::fmt::Write;

use actum::books::Digest;

use super::html::{approval_form, esc, operate_form, page, reconcile_form, run_link, table, when};
use crate::show::{Story, span};
use crate::text::{fmt_bytes, fmt_duration, fmt_local};

/// Where the bars start, after the labels, and how wide they may be, px.
const LABEL_WIDTH_PX: f64 = 230.0;
const BARS_WIDTH_PX: f64 = 640.0;
/// The height of one row of the time line, px.
const ROW_HEIGHT_PX: u32 = 20;

/// One mark on the time line: a span, its colour and its tooltip.
struct Bar {
    from_ms: u64,
    to_ms: u64,
    fill: &'static str,
    tip: String,
}

/// A row of the time line with one mark, from `span.0` to `span.1`.
fn one_bar(
    label: String,
    (from_ms, to_ms): (u64, u64),
    fill: &'static str,
    tip: String,
) -> (String, Vec<Bar>) {
    let bar = Bar {
        from_ms,
        to_ms,
        fill,
        tip,
    };
    (label, vec![bar])
}

/// The colour of a state's or an outcome's bar.
fn colour(name: &str) -> &'static str {
    match name {
        "completed" | "confirmed" | "approved" | "signalled" => "#4caf50",
        "failed" | "rejected" | "cancelled" => "#e53935",
        "unknown" | "paused" | "compensating" => "#fb8c00",
        "waiting_human" | "waiting_tool" | "open" => "#1e88e5",
        "running" => "#8bc34a",
        "compensated" => "#8e24aa",
        _ => "#9e9e9e",
    }
}

/// The story's spans on one time line, from the run's creation to its end
/// (or to now, while it is not over).
fn timeline(s: &Story) -> String {
    let start_ms = s.head.created_ms;
    let over = matches!(s.head.state, "completed" | "failed" | "cancelled");
    let ends = s
        .steps
        .iter()
        .filter_map(|st| st.settled_ms)
        .chain(s.waits.iter().filter_map(|w| w.ended_ms));
    let end_ms = if over {
        ends.fold(s.head.updated_ms, u64::max)
    } else {
        s.now_ms
    }
    .max(start_ms + 1);
    let x = |ms: u64| {
        let from_start = ms.clamp(start_ms, end_ms) - start_ms;
        LABEL_WIDTH_PX + from_start as f64 * BARS_WIDTH_PX / (end_ms - start_ms) as f64
    };
    // A label and its marks, per row.
    let mut rows: Vec<(String, Vec<Bar>)> = Vec::new();
    let states = s.states.iter().enumerate().map(|(i, c)| Bar {
        from_ms: c.at_ms,
        to_ms: s.states.get(i + 1).map_or(end_ms, |next| next.at_ms),
        fill: colour(&c.to),
        tip: format!("{} from {} ({})", c.to, fmt_local(c.at_ms), c.why),
    });
    rows.push(("states".into(), states.collect()));
    for st in &s.steps {
        let tip = format!(
            "{} {} ({}), {}",
            st.tool,
            st.outcome,
            fmt_local(st.intended_ms),
            span(st.intended_ms, st.settled_ms, s.now_ms)
        );
        rows.push(one_bar(
            format!("step {}", st.key),
            (st.intended_ms, st.settled_ms.unwrap_or(end_ms)),
            colour(st.outcome),
            tip,
        ));
    }
    for w in &s.waits {
        let tip = format!(
            "{}: {}, {}",
            w.waits_for,
            w.how,
            span(w.opened_ms, w.ended_ms, s.now_ms)
        );
        rows.push(one_bar(
            format!("wait {}", w.step),
            (w.opened_ms, w.ended_ms.unwrap_or(end_ms)),
            colour(w.how),
            tip,
        ));
    }
    let height = ROW_HEIGHT_PX * (rows.len() as u32 + 1);
    let width = LABEL_WIDTH_PX + BARS_WIDTH_PX + 10.0;
    let mut svg = format!(
        "<svg id=\"timeline\" width=\"{width}\" height=\"{height}\" role=\"img\" \
         aria-label=\"time line\">"
    );
    for (i, (label, bars)) in rows.iter().enumerate() {
        let y = ROW_HEIGHT_PX * i as u32;
        let _ = write!(svg, "<text x=\"0\" y=\"{}\">{}</text>", y + 14, esc(label));
        for Bar {
            from_ms,
            to_ms,
            fill,
            tip,
        } in bars
        {
            let left = x(*from_ms);
            let bar = (x(*to_ms) - left).max(2.0);
            let _ = write!(
                svg,
                "<rect x=\"{left:.1}\" y=\"{}\" width=\"{bar:.1}\" height=\"14\" fill=\"{fill}\">\
                 <title>{}</title></rect>",
                y + 3,
                esc(tip)
            );
        }
    }
    let axis_y = ROW_HEIGHT_PX * rows.len() as u32 + 14;
    let _ = write!(
        svg,
        "<text x=\"{LABEL_WIDTH_PX}\" y=\"{axis_y}\">{}</text>\
         <text x=\"{}\" y=\"{axis_y}\" text-anchor=\"end\">{}</text></svg>",
        esc(&fmt_local(start_ms)),
        LABEL_WIDTH_PX + BARS_WIDTH_PX,
        esc(&if over {
            fmt_local(end_ms)
        } else {
            "now".to_string()
        })
    );
    svg
}

/// The run's head: state, agent, times, lease and what the page read.
fn head(s: &Story) -> String {
    let h = &s.head;
    let lease = match &h.lease {
        Some(l) if l.live => format!(
            "held by {} (token {}) until {}",
            esc(&l.worker),
            l.token,
            when(l.expires_ms)
        ),
        Some(l) => format!(
            "no live lease (the last, token {} of {}, ran out {} ago)",
            l.token,
            esc(&l.worker),
            fmt_duration(s.now_ms.saturating_sub(l.expires_ms))
        ),
        None => "no lease held".to_string(),
    };
    format!(
        "<p><b id=\"state\">{}</b>, agent {}, created {}, last changed {} later; trace {}; \
         parent {}</p><p>{lease}</p><p class=\"asof\">{}</p>",
        esc(h.state),
        esc(&h.agent),
        when(h.created_ms),
        fmt_duration(h.updated_ms.saturating_sub(h.created_ms)),
        esc(&h.trace_id),
        h.parent
            .as_deref()
            .map_or_else(|| "none".to_string(), run_link),
        esc(&as_of(s)),
    )
}

/// Which state of the books the page shows: an LSN, or the PostgreSQL
/// server read.
fn as_of(s: &Story) -> String {
    match &s.postgres {
        Some(server) => format!("from PostgreSQL {server}"),
        None => format!(
            "as of LSN {}{}",
            s.durable_lsn,
            if s.live {
                " (live database: another process has it open; this is a consistent snapshot)"
            } else {
                ""
            }
        ),
    }
}

/// The steps' table, with a reconcile form on each unknown one.
fn steps(s: &Story, token: Option<&str>) -> String {
    let rows: Vec<Vec<String>> = s
        .steps
        .iter()
        .map(|st| {
            let outcome = match &st.detail {
                Some(d) => format!("{}: {}", esc(st.outcome), esc(d)),
                None => esc(st.outcome),
            };
            let act = if st.outcome == "unknown" {
                reconcile_form(token, &st.key)
            } else {
                String::new()
            };
            vec![
                format!("<code>{}</code>", esc(&st.key)),
                esc(&st.tool),
                esc(st.class),
                format!("{} (resent {})", st.attempt, st.resends),
                outcome + &act,
                st.receipt_bytes.map_or_else(|| "-".into(), fmt_bytes),
                when(st.intended_ms),
                esc(&span(st.intended_ms, st.settled_ms, s.now_ms)),
                esc(&st.rationale),
            ]
        })
        .collect();
    table(
        &[
            "Key", "Tool", "Class", "Attempt", "Outcome", "Receipt", "Began", "Took", "Why",
        ],
        &rows,
    )
}

/// The waits' table, with the approval's buttons on the open one.
fn waits(s: &Story, approval: Option<&Digest>, token: Option<&str>) -> String {
    let rows: Vec<Vec<String>> = s
        .waits
        .iter()
        .map(|w| {
            let act = match approval {
                Some(digest) if w.how == "open" && w.waits_for.starts_with("approval") => {
                    approval_form(token, &s.head.run, &digest.to_string())
                }
                _ => String::new(),
            };
            vec![
                esc(&w.step),
                esc(&w.waits_for),
                when(w.opened_ms),
                esc(&span(w.opened_ms, w.ended_ms, s.now_ms)),
                esc(w.how),
                esc(w.by.as_deref().unwrap_or("-")) + &act,
            ]
        })
        .collect();
    table(&["Step", "For", "Opened", "Lasted", "How", "By"], &rows)
}

/// The journal's table.
fn journal(s: &Story) -> String {
    let rows: Vec<Vec<String>> = s
        .journal
        .iter()
        .map(|l| {
            vec![
                l.seq.to_string(),
                when(l.at_ms),
                l.token.map_or_else(|| "-".into(), |t| t.to_string()),
                esc(&l.said),
                esc(&l.why),
            ]
        })
        .collect();
    table(&["#", "When", "Token", "What", "Why"], &rows)
}

/// The run's page; `approval` is the digest of the approval it waits
/// for, if it waits for one.
pub fn run_page(s: &Story, approval: Option<&Digest>, token: Option<&str>) -> String {
    let mut body = head(s);
    body.push_str(&operate_form(token, &s.head.run));
    body.push_str("<h2>Time line</h2>");
    body.push_str(&timeline(s));
    let states: Vec<Vec<String>> = s
        .states
        .iter()
        .map(|c| {
            vec![
                when(c.at_ms),
                esc(c.from.as_deref().unwrap_or("-")),
                esc(&c.to),
                esc(&c.why),
            ]
        })
        .collect();
    body.push_str("<h2>States</h2>");
    body.push_str(&table(&["When", "From", "To", "Why"], &states));
    if !s.steps.is_empty() {
        body.push_str("<h2>Steps</h2>");
        body.push_str(&steps(s, token));
    }
    if !s.model_calls.is_empty() {
        let calls: Vec<Vec<String>> = s
            .model_calls
            .iter()
            .map(|m| {
                vec![
                    m.position.to_string(),
                    esc(&m.input_digest),
                    fmt_bytes(m.output_bytes),
                    m.tokens_in.to_string(),
                    m.tokens_out.to_string(),
                    m.cost_micros.to_string(),
                    when(m.recorded_ms),
                    esc(&m.rationale),
                ]
            })
            .collect();
        body.push_str("<h2>Model calls</h2>");
        body.push_str(&table(
            &[
                "#",
                "Input",
                "Output",
                "Tokens in",
                "Tokens out",
                "Cost",
                "When",
                "Why",
            ],
            &calls,
        ));
    }
    if !s.waits.is_empty() {
        body.push_str("<h2>Waits</h2>");
        body.push_str(&waits(s, approval, token));
    }
    if let Some(b) = &s.budget {
        let _ = write!(
            body,
            "<h2>Budget</h2><p>limits {}; spent {}; held {} ({} open reservations); ran {}</p>",
            esc(b.limits.as_deref().unwrap_or("none")),
            esc(&b.spent),
            esc(&b.held),
            b.open_reservations,
            fmt_duration(b.ran_ms)
        );
    }
    if let Some(saga) = &s.saga {
        let _ = write!(
            body,
            "<h2>Saga</h2><p>compensable steps, in order: {}; {}</p>",
            esc(&saga.steps.join(", ")),
            saga.ends.map_or_else(
                || "not compensating".to_string(),
                |end| format!("compensating, then the run ends {end}")
            )
        );
    }
    let _ = write!(body, "<h2>Journal ({} lines)</h2>", s.journal.len());
    body.push_str(&journal(s));
    page(&format!("Run {}", s.head.run), token.is_some(), &body)
}
