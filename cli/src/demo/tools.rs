//! The demo's outside world: a bank and a mailer, each an append-only file
//! in the demo directory recording every application of a request, one
//! line each (`time_ms`, idempotency key, fencing token, what was done,
//! receipt). The bank, like a real payment API, deduplicates by key for a
//! window: a request whose key it applied inside the window is answered
//! with the first receipt and not applied again. The mailer, like SMTP,
//! sends every request it receives, so a mail sent twice is two mails; it
//! can be asked whether a key was sent (its sent folder), and it drops a
//! request that reaches it after the deadline its sender gave (the sender's
//! lease expiry), so a request held up past it cannot land after a
//! successor found the key unsent and sent it again under a new key.
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
    /// The line that records it in its tool's file.
    pub(super) fn line(&self) -> String {
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
    /// How long it remembers a key; `None` for a tool that applies every
    /// request it receives.
    dedup_window_ms: Option<u64>,
    state: Mutex<Ledger>,
}

#[derive(Debug)]
struct Ledger {
    file: File,
    /// Every key applied: when (its latest application), and the receipt.
    seen: HashMap<String, (u64, String)>,
    applied: u64,
}

/// What a request got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Applied now; here is its receipt.
    Applied {
        /// The receipt.
        receipt: String,
    },
    /// The key was applied before, inside the window: not applied again,
    /// the first receipt.
    Deduplicated {
        /// The first application's receipt.
        receipt: String,
    },
    /// The request reached the tool after its deadline: not applied.
    Expired {
        /// The deadline, ms since the epoch.
        deadline_ms: u64,
    },
}

impl Tool {
    /// Opens the tool whose applications are recorded in `path`: one that
    /// deduplicates a key for `dedup_window_ms`, or (`None`) one that
    /// applies every request.
    pub fn open(
        path: &Path,
        prefix: &'static str,
        dedup_window_ms: Option<u64>,
    ) -> io::Result<Tool> {
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
            dedup_window_ms,
            state: Mutex::new(Ledger {
                file,
                seen,
                applied: past.len() as u64,
            }),
        })
    }

    /// Handles one request: drops it if it arrives at or after
    /// `deadline_ms`, answers a key applied inside the window (of a tool
    /// that deduplicates) with its receipt, or applies it (recorded and
    /// synced before this returns).
    pub fn request(
        &self,
        key: &str,
        token: u64,
        what: &str,
        deadline_ms: Option<u64>,
    ) -> io::Result<Answer> {
        assert!(!key.contains('\t') && !what.contains(['\t', '\n']));
        let mut ledger = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now_ms = now_ms();
        if let Some(deadline_ms) = deadline_ms.filter(|d| now_ms >= *d) {
            return Ok(Answer::Expired { deadline_ms });
        }
        if let Some(window_ms) = self.dedup_window_ms
            && let Some((at_ms, receipt)) = ledger.seen.get(key)
            && now_ms.saturating_sub(*at_ms) < window_ms
        {
            return Ok(Answer::Deduplicated {
                receipt: receipt.clone(),
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
        Ok(Answer::Applied { receipt })
    }

    /// The receipt of `key`'s latest application, if the tool applied it:
    /// what a query of the tool answers (a mailer's sent folder).
    pub fn find(&self, key: &str) -> Option<String> {
        let ledger = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ledger.seen.get(key).map(|(_, receipt)| receipt.clone())
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

    fn applied(receipt: &str) -> Answer {
        Answer::Applied {
            receipt: receipt.to_string(),
        }
    }

    #[test]
    fn a_key_is_applied_once_and_answered_from_memory_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bank.log");
        let bank = Tool::open(&path, "tx", Some(DEDUP_WINDOW_MS)).unwrap();
        let first = bank.request("r/pay/1", 1, "pay 5", None).unwrap();
        assert_eq!(first, applied("tx-1"));
        drop(bank);
        let bank = Tool::open(&path, "tx", Some(DEDUP_WINDOW_MS)).unwrap();
        let again = bank.request("r/pay/1", 2, "pay 5", None).unwrap();
        assert_eq!(
            again,
            Answer::Deduplicated {
                receipt: "tx-1".into()
            }
        );
        assert_eq!(
            bank.request("s/pay/1", 1, "pay 6", None).unwrap(),
            applied("tx-2")
        );
        let recorded = read_applications(&path).unwrap();
        assert_eq!(recorded.len(), 2);
        assert_eq!(recorded[1].key, "s/pay/1");
        std::fs::write(&path, "garbage\n").unwrap();
        assert!(read_applications(&path).is_err());
    }

    #[test]
    fn the_mailer_sends_every_request_and_drops_one_past_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mail.log");
        let mailer = Tool::open(&path, "msg", None).unwrap();
        assert_eq!(mailer.find("r/mail/1"), None);
        let far = now_ms() + 60_000;
        assert_eq!(
            mailer.request("r/mail/1", 1, "hi", Some(far)).unwrap(),
            applied("msg-1")
        );
        // The same key again is a second mail.
        assert_eq!(
            mailer.request("r/mail/1", 1, "hi", Some(far)).unwrap(),
            applied("msg-2")
        );
        assert_eq!(mailer.find("r/mail/1").as_deref(), Some("msg-2"));
        let past = now_ms().saturating_sub(1);
        assert_eq!(
            mailer.request("r/mail/2", 1, "late", Some(past)).unwrap(),
            Answer::Expired { deadline_ms: past }
        );
        assert_eq!(mailer.find("r/mail/2"), None);
        let keys: Vec<String> = read_applications(&path)
            .unwrap()
            .into_iter()
            .map(|a| a.key)
            .collect();
        assert_eq!(keys, ["r/mail/1", "r/mail/1"]);
        drop(mailer);
        let mailer = Tool::open(&path, "msg", None).unwrap();
        assert_eq!(mailer.find("r/mail/1").as_deref(), Some("msg-2"));
    }
}
