//! `actum ui DIR`: a web page for operators, served from this binary on a
//! local address: the runs (filtered as `actum runs`), one run's story (as
//! `actum show`, its steps and waits on a time line), stuck runs (as
//! `actum stuck`), the approvals runs wait for with approve and reject
//! buttons, the effects whose outcome is unknown with a reconcile form,
//! and `/metrics` in Prometheus' text format.
//!
//! Every page is rendered on the server from the same gathering the text
//! commands print (`runs::list`, `show::gather`, `stuck::gather`,
//! `answer::pending_approvals`), read per request through
//! `live::open_to_read`, so a page of a live database is a consistent
//! snapshot that says its LSN. The token printed at start is random from
//! the OS (`token.rs`); opening the printed URL keeps it in a cookie.
//!
//! **Invariant:** a write happens only in `act.rs`, only for a request
//! whose form carries the token (anything else is answered 403 and changes
//! nothing), and is journaled with the operator's name and reason; every
//! string taken from the books is HTML-escaped before it reaches a page
//! (`html::esc`).
//!
//! **Boundary:** no HTTP is written by hand (axum on tokio serves it); the
//! page holds no engine open between requests, so a stopped database stays
//! free for workers to open.

mod act;
mod html;
mod metrics;
mod pages;
mod serve;
mod story;
mod token;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use crate::args::UiArgs;
use crate::failure::CliError;
use crate::live::open_to_read;

/// Runs `ui`: serves the page until the process is stopped.
pub fn run(args: &UiArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    // Refuse a directory that holds no database now, not at the first page.
    drop(open_to_read(dir).map_err(|e| CliError::engine(dir, e))?);
    let token = token::new_token()
        .map_err(|e| CliError::unusable(format!("cannot read a random token from the OS: {e}")))?;
    let listener = std::net::TcpListener::bind(args.listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| CliError::unusable(format!("cannot listen on {}: {e}", args.listen)))?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::unusable(format!("cannot listen on {}: {e}", args.listen)))?;
    let app = Arc::new(serve::App::new(dir.clone(), token, bound.port()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .map_err(|e| CliError::unusable(format!("cannot start the server: {e}")))?;
    let url = format!("http://{bound}/?token={}", app.token());
    // One line on stdout, the URL last, for a person or a script to read;
    // nothing is written to stdout after it, so its reader may go away.
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "actum ui: serving {} at {url}",
        crate::place::shown(dir)
    )
    .and_then(|()| out.flush())
    .map_err(CliError::output)?;
    drop(out);
    // A failed write to stderr is no reason not to serve.
    let _ = writeln!(
        std::io::stderr(),
        "open that URL: its token lets the page write (approve, reconcile, pause); Ctrl-C stops"
    );
    runtime
        .block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            axum::serve(listener, serve::router(app)).await
        })
        .map_err(|e| CliError::unusable(format!("serving on {bound} stopped: {e}")))?;
    Ok(ExitCode::SUCCESS)
}
