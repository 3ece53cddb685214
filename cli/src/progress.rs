//! Progress on stderr for long work (indicatif): a counter of runs read,
//! a spinner for one long call, or a bar towards a known total. Drawn only when stderr is a terminal,
//! so pipes, logs and tests see nothing of it.
//!
//! **Invariant:** progress never writes to stdout, which carries the
//! command's output.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a spinner redraws by itself.
const TICK_MS: u64 = 120;

/// True if a person watches stderr.
pub fn visible() -> bool {
    std::io::stderr().is_terminal()
}

/// A counter of `what` done so far (the total is not known up front).
pub fn counter(what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, target());
    let style = ProgressStyle::with_template(&format!("{{spinner}} {{pos}} {what} {{msg}}"))
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(TICK_MS));
    bar
}

/// A spinner for one long call whose progress cannot be counted (the
/// engine reading its books), with the time it has taken.
pub fn spinner(what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(None, target());
    let style = ProgressStyle::with_template(&format!("{{spinner}} {what} {{elapsed}}"))
        .unwrap_or_else(|_| ProgressStyle::default_spinner());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(TICK_MS));
    bar
}

/// A bar towards `total`.
pub fn bar(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), target());
    let template = format!("[{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {what} {{msg}}");
    let style =
        ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(TICK_MS));
    bar
}

fn target() -> ProgressDrawTarget {
    if visible() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}
