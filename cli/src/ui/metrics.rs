//! `/metrics`: the engine's `Metrics` (`Engine::metrics`: the counters as
//! the last checkpoint stored them, `metric.NAME` in the state store's meta
//! table, plus what this open counted; on a live database whose engine
//! serves its operator channel, that engine's own, live) and the runs by
//! state (`Engine::look`), in
//! Prometheus' text exposition format: a `# HELP` and a `# TYPE` line, then
//! `actum_NAME VALUE`.
//!
//! **Invariant:** every field `Metrics` serializes appears, a new one
//! included (with a plain help line until it is described here); every
//! state appears in `actum_runs`, with 0 when no run is in it.

use std::fmt::Write;
use std::path::Path;

use actum::books::RunState;
use actum::engine::{Engine, Look, Metrics};
use actum::operator::channel;

use crate::live::{open_to_read, served};

/// How long a run must be stuck to count in `actum_stuck`: `actum stuck`'s
/// default.
pub const STUCK_AFTER_MS: u64 = 3_600_000;

/// The help line and the metric type of each of `Metrics`' fields.
fn described(name: &str) -> (&'static str, &'static str) {
    match name {
        "commits" => (
            "Records logged (each a commit of one or more commands).",
            "counter",
        ),
        "fsyncs" => ("fdatasync calls of the log.", "counter"),
        "resumes" => ("Runs leased again after their first lease.", "counter"),
        "receipts_served" => (
            "Begins answered with the receipt the ledger holds.",
            "counter",
        ),
        "acts_prevented" => ("Begins that told the caller not to act.", "counter"),
        "resends" => ("Begins that resent an intent with its own key.", "counter"),
        "queries" => ("Begins that asked the caller to query the tool.", "counter"),
        "unknowns" => ("Outcomes recorded unknown.", "counter"),
        "decisions_replayed" => ("Model calls answered from the decision journal.", "counter"),
        "waits_ended" => ("Waits ended that the wait percentiles are over.", "gauge"),
        "wait_p50_ms" => ("Median time a wait lasted, ms.", "gauge"),
        "wait_p95_ms" => ("95th percentile of the time a wait lasted, ms.", "gauge"),
        "stuck" => ("Runs stuck for an hour or longer (actum stuck).", "gauge"),
        _ => (
            "An actum engine metric (see actum::engine::Metrics).",
            "gauge",
        ),
    }
}

/// The metrics of the database in `dir` and its runs by state, as
/// Prometheus reads them: from the engine that has it open, through its
/// operator channel, if it serves one (its live counters and wait times);
/// else from an engine [`open_to_read`] opened (a snapshot of a live
/// database holds the counters its last checkpoint stored).
pub fn of_dir(dir: &Path) -> actum::Result<String> {
    let live = served(dir, "metrics", |dir| {
        let metrics = channel::metrics(dir, STUCK_AFTER_MS)?;
        Ok(metrics.zip(channel::look(dir)?))
    });
    if let Some((metrics, look)) = live {
        return Ok(exposition(&metrics, &look));
    }
    let reading = open_to_read(dir)?;
    of_engine(&reading.engine)
}

/// The metrics of `engine` and its runs by state, as Prometheus reads them.
pub fn of_engine(engine: &Engine) -> actum::Result<String> {
    Ok(exposition(
        &engine.metrics(STUCK_AFTER_MS)?,
        &engine.look()?,
    ))
}

/// `metrics` and the runs by state of `look`, in the text format.
fn exposition(metrics: &Metrics, look: &Look) -> String {
    // `Metrics` is a struct of numbers: it serializes as an object.
    let fields = serde_json::to_value(metrics)
        .ok()
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default();
    assert!(!fields.is_empty(), "Metrics has fields");
    let mut out = String::new();
    for (name, value) in &fields {
        let (help, kind) = described(name);
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "# HELP actum_{name} {help}\n# TYPE actum_{name} {kind}\nactum_{name} {value}"
        );
    }
    out.push_str("# HELP actum_runs Runs by state.\n# TYPE actum_runs gauge\n");
    for state in RunState::ALL {
        let count = look.runs_by_state.get(state.name()).copied().unwrap_or(0);
        let _ = writeln!(out, "actum_runs{{state=\"{}\"}} {count}", state.name());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_has_its_own_help_and_every_state_a_count() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
        let engine = Engine::open(dir.path(), actum::engine::EngineOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", dir.path().display()));
        let text = of_engine(&engine).unwrap_or_else(|e| panic!("metrics: {e}"));
        assert!(
            !text.contains("see actum::engine::Metrics"),
            "a metric has no help line of its own: {text}"
        );
        assert!(
            text.contains("# TYPE actum_fsyncs counter\nactum_fsyncs "),
            "{text}"
        );
        for state in RunState::ALL {
            let line = format!("actum_runs{{state=\"{}\"}} 0\n", state.name());
            assert!(text.contains(&line), "{line} missing: {text}");
        }
    }
}
