//! `/metrics`: the engine's `Metrics` (`Engine::metrics`: the counters as
//! the last checkpoint stored them, `metric.NAME` in the state store's meta
//! table, plus what this open counted) and the runs by state, in
//! Prometheus' text exposition format: a `# HELP` and a `# TYPE` line, then
//! `actum_NAME VALUE`.
//!
//! **Invariant:** every field `Metrics` serializes appears, a new one
//! included (with a plain help line until it is described here); every
//! state appears in `actum_runs`, with 0 when no run is in it.

use std::collections::BTreeMap;
use std::fmt::Write;

use actum::books::RunState;
use actum::engine::Engine;

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

/// The metrics of `engine` and its runs by state, as Prometheus reads them.
pub fn exposition(engine: &Engine) -> actum::Result<String> {
    let metrics = engine.metrics(STUCK_AFTER_MS)?;
    // `Metrics` is a struct of numbers: it serializes as an object.
    let fields = serde_json::to_value(&metrics)
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
    let mut by_state: BTreeMap<&'static str, u64> =
        RunState::ALL.iter().map(|s| (s.name(), 0)).collect();
    crate::runs::each_run(engine, None, |run| {
        *by_state.entry(run.state.name()).or_default() += 1;
        Ok(())
    })?;
    out.push_str("# HELP actum_runs Runs by state.\n# TYPE actum_runs gauge\n");
    for (state, count) in &by_state {
        let _ = writeln!(out, "actum_runs{{state=\"{state}\"}} {count}");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_has_its_own_help_and_every_state_a_count() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
        let engine = Engine::open(dir.path(), actum::engine::EngineOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", dir.path().display()));
        let text = exposition(&engine).unwrap_or_else(|e| panic!("metrics: {e}"));
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
