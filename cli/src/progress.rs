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
    drawn(
        None,
        &format!("{{spinner}} {{pos}} {what} {{msg}}"),
        ProgressStyle::default_spinner,
    )
}

/// A spinner for one long call whose progress cannot be counted (the
/// engine reading its books), with the time it has taken.
pub fn spinner(what: &str) -> ProgressBar {
    drawn(
        None,
        &format!("{{spinner}} {what} {{elapsed}}"),
        ProgressStyle::default_spinner,
    )
}

/// A bar towards `total`.
pub fn bar(total: u64, what: &str) -> ProgressBar {
    drawn(
        Some(total),
        &format!("[{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {what} {{msg}}"),
        ProgressStyle::default_bar,
    )
}

/// A progress bar of `len` (`None`: unknown) drawn with `template` (or
/// `fallback`'s style if it does not parse), ticking by itself.
fn drawn(len: Option<u64>, template: &str, fallback: fn() -> ProgressStyle) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(len, target());
    bar.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| fallback()));
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
