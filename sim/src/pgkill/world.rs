//! The world the kill loop's tools act on: one file per run in a
//! directory every worker process shares, each line one thing that
//! happened, appended under an exclusive lock of the file, so a check and
//! the append it decides on are one step even across processes.
//!
//! - `act <tool> <key> <token>`: the tool did what it was asked (the
//!   effect itself: a charge applied, a mail sent);
//! - `fence <token>`: the charge tool was asked about the run under
//!   `token`, and from then on refuses a request under an older one (what
//!   `Fencing::Checks` promises the runtime);
//! - `ack <step> <key>`: the handler got the step's result back.
//!
//! A SIGKILL cannot leave half a line: each line is one `write` of a few
//! dozen bytes to a file opened for appending. The world is outside the
//! database, so a server crash loses none of it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use actum::books::Outcome;
use actum::runtime::Call;

/// A line of a run's world file, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    /// A tool acted.
    Act {
        /// `charge` or `mail`.
        tool: String,
        /// The effect's key (`run/step/attempt`).
        key: String,
        /// The fencing token the request carried.
        token: u64,
    },
    /// The charge tool was asked about the run under this token.
    Fence {
        /// The asker's fencing token.
        token: u64,
    },
    /// The handler got the step's result back.
    Ack {
        /// The step.
        step: String,
        /// The key of the entry the result came from.
        key: String,
    },
}

impl Line {
    fn parse(text: &str) -> Option<Line> {
        let words: Vec<&str> = text.split(' ').collect();
        match words.as_slice() {
            ["act", tool, key, token] => Some(Line::Act {
                tool: (*tool).to_string(),
                key: (*key).to_string(),
                token: token.parse().ok()?,
            }),
            ["fence", token] => Some(Line::Fence {
                token: token.parse().ok()?,
            }),
            ["ack", step, key] => Some(Line::Ack {
                step: (*step).to_string(),
                key: (*key).to_string(),
            }),
            _ => None,
        }
    }
}

/// The world's directory.
#[derive(Clone, Debug)]
pub struct World {
    dir: PathBuf,
}

/// The receipt the charge tool gives for `key`.
pub fn charge_receipt(key: &str) -> Vec<u8> {
    format!("ch:{key}").into_bytes()
}

/// The receipt the mail tool gives for `key`.
pub fn mail_receipt(key: &str) -> Vec<u8> {
    format!("ml:{key}").into_bytes()
}

impl World {
    /// The world in `dir` (made if missing).
    pub fn new(dir: &Path) -> std::io::Result<World> {
        std::fs::create_dir_all(dir)?;
        Ok(World {
            dir: dir.to_path_buf(),
        })
    }

    fn path(&self, run: &str) -> PathBuf {
        self.dir.join(format!("{run}.log"))
    }

    /// Runs `change` on the lines of `run`'s file under its lock; the
    /// lines it returns are appended before the lock is let go.
    fn locked<T>(
        &self,
        run: &str,
        change: impl FnOnce(&[Line]) -> (T, Vec<String>),
    ) -> std::io::Result<T> {
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(self.path(run))?;
        file.lock()?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        let lines: Vec<Line> = text.lines().filter_map(Line::parse).collect();
        let (value, appended) = change(&lines);
        for line in appended {
            file.write_all(format!("{line}\n").as_bytes())?;
        }
        file.unlock()?;
        Ok(value)
    }

    /// Every line of `run`'s file.
    pub fn lines(&self, run: &str) -> std::io::Result<Vec<Line>> {
        let mut text = String::new();
        match File::open(self.path(run)) {
            Ok(mut file) => {
                file.read_to_string(&mut text)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(text.lines().filter_map(Line::parse).collect())
    }

    /// The charge tool: applies every request it receives (it deduplicates
    /// nothing), unless a query under a newer token fenced the run.
    pub fn charge(&self, run: &str, call: &Call<'_>) -> Outcome {
        let key = call.key.encode();
        let token = call.token.0;
        let done = self.locked(run, |lines| {
            let fenced = lines
                .iter()
                .any(|l| matches!(l, Line::Fence { token: t } if *t > token));
            if fenced {
                return (false, Vec::new());
            }
            (true, vec![format!("act charge {key} {token}")])
        });
        match done {
            Ok(true) => Outcome::Confirmed {
                receipt: charge_receipt(&key),
            },
            Ok(false) => Outcome::Failed {
                retryable: false,
                reason: "fenced: a newer token asked about this run".into(),
            },
            Err(e) => Outcome::Failed {
                retryable: false,
                reason: format!("the world failed: {e}"),
            },
        }
    }

    /// The charge tool, asked whether `call`'s request was applied; the
    /// question fences every request under an older token.
    pub fn charge_query(&self, run: &str, call: &Call<'_>) -> Outcome {
        let key = call.key.encode();
        let token = call.token.0;
        let found = self.locked(run, |lines| {
            let applied = lines.iter().any(
                |l| matches!(l, Line::Act { tool, key: k, .. } if tool == "charge" && *k == key),
            );
            (applied, vec![format!("fence {token}")])
        });
        match found {
            Ok(true) => Outcome::Confirmed {
                receipt: charge_receipt(&key),
            },
            // Never applied, and now never will be: safe to try again.
            Ok(false) => Outcome::Failed {
                retryable: true,
                reason: "not applied".into(),
            },
            Err(e) => Outcome::Failed {
                retryable: false,
                reason: format!("the world failed: {e}"),
            },
        }
    }

    /// The mail tool: deduplicates by key (a request whose key it saw is
    /// answered with the first one's receipt, and sends nothing).
    pub fn mail(&self, run: &str, call: &Call<'_>) -> Outcome {
        let key = call.key.encode();
        let token = call.token.0;
        let sent = self.locked(run, |lines| {
            let seen = lines.iter().any(
                |l| matches!(l, Line::Act { tool, key: k, .. } if tool == "mail" && *k == key),
            );
            let append = if seen {
                Vec::new()
            } else {
                vec![format!("act mail {key} {token}")]
            };
            ((), append)
        });
        match sent {
            Ok(()) => Outcome::Confirmed {
                receipt: mail_receipt(&key),
            },
            Err(e) => Outcome::Failed {
                retryable: false,
                reason: format!("the world failed: {e}"),
            },
        }
    }

    /// Notes that the handler got `step`'s result (`key`'s) back.
    pub fn ack(&self, run: &str, step: &str, key: &str) -> std::io::Result<()> {
        self.locked(run, |_| ((), vec![format!("ack {step} {key}")]))
    }
}
