//! The demo's outside world: a bank and a mailer, each an append-only file
//! in the demo directory recording every application of a request, one
//! line each (`time_ms`, idempotency key, fencing token, what was done,
//! receipt). Like a real payment API, each deduplicates by key for a
//! window: a request whose key it applied inside the window is answered
//! with the first receipt and not applied again.
//!
//! A request is applied, the line written and `fdatasync`ed, and only then
//! acknowledged, so an application survives the kill of the process that
//! made it, as a real bank's does.
//!
//! **Invariant:** the file holds every application, in order; a key
//! appears twice only if it was applied twice.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// How long a tool remembers a key (Stripe keeps idempotency keys 24 h).
pub const DEDUP_WINDOW_MS: u64 = 24 * 3_600_000;

/// One line of a tool's file: one application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Application {
    /// When it was applied, ms since the epoch.
    pub time_ms: u64,
    /// The request's idempotency key (`run/step/attempt`).
    pub key: String,
    /// The fencing token it came with.
    pub token: u64,
    /// What was done (the request's arguments).
    pub what: String,
    /// The receipt handed back.
    pub receipt: String,
}

impl Application {
    fn line(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}\n",
            self.time_ms, self.key, self.token, self.what, self.receipt
        )
    }

    fn parse(line: &str) -> Option<Application> {
        let mut fields = line.split('\t');
        let application = Application {
            time_ms: fields.next()?.parse().ok()?,
            key: fields.next()?.to_string(),
            token: fields.next()?.parse().ok()?,
            what: fields.next()?.to_string(),
            receipt: fields.next()?.to_string(),
        };
        fields.next().is_none().then_some(application)
    }
}

/// Reads every application recorded in `path` (none if it does not exist);
/// `Err` naming the line if one does not parse.
pub fn read_applications(path: &Path) -> io::Result<Vec<Application>> {
    let mut text = String::new();
    match File::open(path) {
        Ok(mut file) => file.read_to_string(&mut text)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let application = Application::parse(line).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} line {}: not an application: {line:?}",
                    path.display(),
                    n + 1
                ),
            )
        })?;
        found.push(application);
    }
    Ok(found)
}

/// A file-backed tool (the bank or the mailer).
#[derive(Debug)]
pub struct Tool {
    path: PathBuf,
    /// The receipt prefix (`tx`, `msg`).
    prefix: &'static str,
    state: Mutex<Ledger>,
}

#[derive(Debug)]
struct Ledger {
    file: File,
    /// Every key applied: when, and the receipt.
    seen: HashMap<String, (u64, String)>,
    applied: u64,
}

/// What a request got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The receipt.
    pub receipt: String,
    /// True if the key was applied before and this request was not.
    pub deduplicated: bool,
}

impl Tool {
    /// Opens the tool whose applications are recorded in `path`.
    pub fn open(path: &Path, prefix: &'static str) -> io::Result<Tool> {
        let mut seen = HashMap::new();
        let past = read_applications(path)?;
        for application in &past {
            seen.insert(
                application.key.clone(),
                (application.time_ms, application.receipt.clone()),
            );
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Tool {
            path: path.to_path_buf(),
            prefix,
            state: Mutex::new(Ledger {
                file,
                seen,
                applied: past.len() as u64,
            }),
        })
    }

    /// Handles one request: applies it (recorded and synced before this
    /// returns), or answers a key applied inside the window with its
    /// receipt.
    pub fn request(&self, key: &str, token: u64, what: &str) -> io::Result<Answer> {
        assert!(!key.contains('\t') && !what.contains(['\t', '\n']));
        let mut ledger = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now_ms = now_ms();
        if let Some((at_ms, receipt)) = ledger.seen.get(key)
            && now_ms.saturating_sub(*at_ms) < DEDUP_WINDOW_MS
        {
            return Ok(Answer {
                receipt: receipt.clone(),
                deduplicated: true,
            });
        }
        let receipt = format!("{}-{}", self.prefix, ledger.applied + 1);
        let application = Application {
            time_ms: now_ms,
            key: key.to_string(),
            token,
            what: what.to_string(),
            receipt: receipt.clone(),
        };
        ledger.file.write_all(application.line().as_bytes())?;
        ledger.file.sync_data()?;
        ledger.applied += 1;
        ledger
            .seen
            .insert(key.to_string(), (now_ms, receipt.clone()));
        Ok(Answer {
            receipt,
            deduplicated: false,
        })
    }

    /// The file the applications are recorded in.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_applied_once_and_answered_from_memory_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bank.log");
        let bank = Tool::open(&path, "tx").unwrap();
        let first = bank.request("r/pay/1", 1, "pay 5").unwrap();
        assert_eq!(first.receipt, "tx-1");
        assert!(!first.deduplicated);
        drop(bank);
        let bank = Tool::open(&path, "tx").unwrap();
        let again = bank.request("r/pay/1", 2, "pay 5").unwrap();
        assert_eq!((again.receipt.as_str(), again.deduplicated), ("tx-1", true));
        assert_eq!(bank.request("s/pay/1", 1, "pay 6").unwrap().receipt, "tx-2");
        let recorded = read_applications(&path).unwrap();
        assert_eq!(recorded.len(), 2);
        assert_eq!(recorded[1].key, "s/pay/1");
        std::fs::write(&path, "garbage\n").unwrap();
        assert!(read_applications(&path).is_err());
    }
}
