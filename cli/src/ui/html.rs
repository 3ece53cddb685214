//! The page's HTML: escaping, the frame every page shares, tables, and the
//! forms that write.
//!
//! **Invariant:** text reaches a page only through `esc` (element text and
//! attribute values alike) or `url` (a value inside a link), so a run id,
//! a reason or a note holding `<script>` shows as text and runs nothing.

use std::fmt::Write;

use crate::text::fmt_local;

/// `text` with the characters HTML gives a meaning escaped (`&`, `<`, `>`,
/// both quotes), safe in element text and in a quoted attribute.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` percent-encoded for a path segment or a query value: every byte
/// but the unreserved ones (`A-Z a-z 0-9 - . _ ~`).
pub fn url(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A time in the machine's time zone, with its milliseconds since the
/// epoch as a tooltip.
pub fn when(ms: u64) -> String {
    format!("<time title=\"{ms}\">{}</time>", esc(&fmt_local(ms)))
}

/// A link to a run's page.
pub fn run_link(run: &str) -> String {
    format!("<a href=\"/runs/{}\">{}</a>", url(run), esc(run))
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222}\
header{background:#1f2d3d;color:#fff;padding:8px 16px}header a{color:#cde;margin-right:14px}\
header b{margin-right:24px}main{padding:8px 16px}\
table{border-collapse:collapse;margin:6px 0 14px}td,th{border-bottom:1px solid #ddd;\
padding:3px 8px;text-align:left;vertical-align:top}th{background:#f4f4f4}\
.asof{color:#666}.ok{background:#e6f4e6;padding:8px}.refused{background:#fbe9e7;padding:8px}\
form.inline{display:inline}input[type=text]{width:12em}fieldset{border:1px solid #ccc;\
margin:6px 0}svg text{font:11px sans-serif}.note{color:#a60}";

/// The frame of every page: its title, the links between pages, whether
/// writes are open to this browser, and `body`.
pub fn page(title: &str, can_write: bool, body: &str) -> String {
    let writes = if can_write {
        ""
    } else {
        "<p class=\"note\">Read only: open the URL <code>actum ui</code> printed (with its \
         <code>?token=</code>) to approve, reconcile or pause from this page.</p>"
    };
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{title} · actum</title><style>{STYLE}</style></head><body>\
         <header><b>actum</b><a href=\"/runs\">Runs</a><a href=\"/stuck\">Stuck</a>\
         <a href=\"/approvals\">Approvals</a><a href=\"/unknown\">Unknown effects</a>\
         <a href=\"/metrics\">Metrics</a></header><main><h1>{title}</h1>{writes}{body}\
         </main></body></html>",
        title = esc(title)
    )
}

/// A table: `headers`, then `rows` of cells that are HTML already.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::from("<table><tr>");
    for h in headers {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}

/// The operator's name and reason fields of a form that writes, the
/// token it carries, and the id of the request it makes: drawn with the
/// form, so a form sent twice (a reload, a resend after a lost answer) is
/// carried out once.
fn who_and_why(token: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"token\" value=\"{}\">\
         <input type=\"hidden\" name=\"request\" value=\"{}\">\
         <label>operator <input type=\"text\" name=\"operator\" required></label> \
         <label>reason <input type=\"text\" name=\"reason\" required></label> ",
        esc(token),
        esc(&crate::operator::made_up_id(None))
    )
}

/// Approve and reject buttons for the approval `run` waits for, bound to
/// its arguments' `digest`; nothing without a token.
pub fn approval_form(token: Option<&str>, run: &str, digest: &str) -> String {
    let Some(token) = token else {
        return String::new();
    };
    format!(
        "<form method=\"post\" action=\"/approve\" class=\"inline\">\
         <input type=\"hidden\" name=\"run\" value=\"{}\">\
         <input type=\"hidden\" name=\"digest\" value=\"{}\">{}\
         <button name=\"decision\" value=\"approve\">Approve</button> \
         <button name=\"decision\" value=\"reject\">Reject</button></form>",
        esc(run),
        esc(digest),
        who_and_why(token)
    )
}

/// The form that settles the effect `key` as confirmed (with a receipt) or
/// failed (with an error); nothing without a token.
pub fn reconcile_form(token: Option<&str>, key: &str) -> String {
    let Some(token) = token else {
        return String::new();
    };
    format!(
        "<form method=\"post\" action=\"/reconcile\">\
         <input type=\"hidden\" name=\"key\" value=\"{}\">\
         <select name=\"outcome\"><option value=\"confirmed\">it happened (confirmed)</option>\
         <option value=\"failed\">it did not happen (failed)</option></select> \
         <label>receipt or error <input type=\"text\" name=\"detail\"></label> {}\
         <button>Reconcile</button></form>",
        esc(key),
        who_and_why(token)
    )
}

/// Pause, resume and cancel buttons for `run`; nothing without a token.
pub fn operate_form(token: Option<&str>, run: &str) -> String {
    let Some(token) = token else {
        return String::new();
    };
    format!(
        "<fieldset><legend>Operator</legend><form method=\"post\" action=\"/operate\">\
         <input type=\"hidden\" name=\"run\" value=\"{}\">{}\
         <button name=\"action\" value=\"pause\">Pause</button> \
         <button name=\"action\" value=\"resume\">Resume</button> \
         <button name=\"action\" value=\"cancel\">Cancel</button></form></fieldset>",
        esc(run),
        who_and_why(token)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_leaves_no_markup_and_urls_no_reserved_byte() {
        let evil = "<script>alert('x')</script> & \"q\"";
        let escaped = esc(evil);
        assert!(!escaped.contains('<') && !escaped.contains('"') && !escaped.contains('\''));
        assert_eq!(esc("run-1:a.b_c"), "run-1:a.b_c");
        assert_eq!(url("a b/c?d&e"), "a%20b%2Fc%3Fd%26e");
        assert_eq!(url("r-1.x_y~"), "r-1.x_y~");
    }

    #[test]
    fn forms_appear_only_with_a_token() {
        assert_eq!(approval_form(None, "r", "ab"), "");
        assert_eq!(reconcile_form(None, "r/s/1"), "");
        assert_eq!(operate_form(None, "r"), "");
        let form = approval_form(Some("t0k"), "r\"x", "ab");
        assert!(form.contains("value=\"t0k\"") && form.contains("r&quot;x"));
    }
}
