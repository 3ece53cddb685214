//! The demo's end: the books and the tools' files held to the invariants,
//! and the summary.
//!
//! - every run completed;
//! - each run's transfer and mail were confirmed once in the books and
//!   applied once by the bank and the mailer (counted by idempotency key
//!   in their files, and by run across keys), with the receipt the books
//!   hold. The mailer sends every request it receives, so a mail sent
//!   twice with one key shows here as that key applied twice, and a mail
//!   sent again under a new attempt's key as its run mailed twice;
//! - no application without a durable intent: every key in the files is
//!   an intent in the books, written before the application;
//! - every mail quotes its run's bank receipt;
//! - the database verifies intact (`actum::verify`).
//!
//! **Invariant:** a broken invariant is a line in `violations`, and the
//! demo passes only with none.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use actum::books::{AuditWhat, EffectKey, EffectKind, EffectStatus, RunId, RunState};
use actum::engine::{Engine, EngineOptions};
use actum::storage::FsStorage;

use super::parent::{Plan, worker_log};
use super::tools::{Application, read_applications};
use super::{BANK_FILE, MAIL_FILE, db_dir, run_name};
use crate::failure::CliError;

/// How many violations the summary lists before it counts the rest.
const VIOLATIONS_SHOWN_MAX: usize = 20;

/// What the parent did to the workers.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Worker processes started.
    pub workers_started: u32,
    /// Worker processes killed with SIGKILL.
    pub kills: u32,
    /// Worker processes that exited with an error.
    pub worker_failures: u32,
    /// The last worker finished every run.
    pub finished: bool,
    /// The deadline passed first.
    pub timed_out: bool,
}

/// What the check found.
#[derive(Debug)]
pub struct Summary {
    plan: Plan,
    tally: Tally,
    elapsed: Duration,
    completed: u32,
    effects_confirmed: u64,
    resends: u64,
    retried: u64,
    resumes: u64,
    transfers: (usize, usize),
    mails: (usize, usize),
    wal_records: u64,
    state_rows: u64,
    violations: Vec<String>,
    worker_log: String,
}

impl Summary {
    /// True if no invariant broke.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// One run's confirmed acts in the books: step name → (key, receipt).
type Confirmed = BTreeMap<String, (String, String)>;

/// Checks the demo in `dir` after the workers are gone.
pub fn check(
    dir: &Path,
    plan: &Plan,
    tally: &Tally,
    elapsed: Duration,
) -> Result<Summary, CliError> {
    let db = db_dir(dir);
    let fail = |e| CliError::engine(&db, e);
    let mut summary = Summary {
        plan: plan.clone(),
        tally: tally.clone(),
        elapsed,
        completed: 0,
        effects_confirmed: 0,
        resends: 0,
        retried: 0,
        resumes: 0,
        transfers: (0, 0),
        mails: (0, 0),
        wal_records: 0,
        state_rows: 0,
        violations: Vec::new(),
        worker_log: String::new(),
    };
    if tally.timed_out {
        summary.violations.push(format!(
            "the runs did not finish within {} s",
            plan.deadline.as_secs()
        ));
    }
    let engine = Engine::open_read_only(&db, EngineOptions::default()).map_err(fail)?;
    let mut books: BTreeMap<String, Confirmed> = BTreeMap::new();
    for n in 1..=plan.runs {
        let run = RunId::new(run_name(n)).map_err(fail)?;
        let confirmed = check_run(&engine, &run, &mut summary).map_err(fail)?;
        books.insert(run.to_string(), confirmed);
    }
    let tools = [(BANK_FILE, "pay"), (MAIL_FILE, "mail")];
    for (file, step) in tools {
        let applications = read_applications(&dir.join(file))
            .map_err(|e| CliError::unusable(format!("cannot read {file}: {e}")))?;
        check_tool(&engine, (file, step), &applications, &books, &mut summary).map_err(fail)?;
        let keys: std::collections::BTreeSet<&str> =
            applications.iter().map(|a| a.key.as_str()).collect();
        let counts = (applications.len(), keys.len());
        if step == "pay" {
            summary.transfers = counts;
        } else {
            check_mails_quote_receipts(&applications, &books, &mut summary);
            summary.mails = counts;
        }
    }
    drop(engine);
    let report = actum::verify::verify_dir(Arc::new(FsStorage::new()), &db).map_err(fail)?;
    summary.wal_records = report.wal_records_checked;
    summary.state_rows = report.state_rows_checked;
    for damage in report.damage() {
        summary.violations.push(format!(
            "the database is damaged: {} ({})",
            damage.what,
            damage.file.display()
        ));
    }
    if !summary.passed() {
        summary.worker_log = worker_log(dir);
    }
    Ok(summary)
}

/// Checks one run in the books; returns its confirmed acts.
fn check_run(engine: &Engine, run: &RunId, summary: &mut Summary) -> actum::Result<Confirmed> {
    let state = engine.run(run)?.map(|r| r.state);
    if state == Some(RunState::Completed) {
        summary.completed += 1;
    } else {
        let state = state.map_or("missing", RunState::name);
        summary
            .violations
            .push(format!("run {run} is {state}, not completed"));
    }
    let mut confirmed = Confirmed::new();
    for entry in engine.effects(run)? {
        summary.resends += u64::from(entry.resends);
        let step = entry.key.step().to_string();
        match (&entry.status, entry.key.kind()) {
            (EffectStatus::Confirmed { receipt }, EffectKind::Act) => {
                summary.effects_confirmed += 1;
                let receipt = String::from_utf8_lossy(receipt).into_owned();
                if confirmed
                    .insert(step.clone(), (entry.key.encode(), receipt))
                    .is_some()
                {
                    summary
                        .violations
                        .push(format!("run {run}: step {step} was confirmed twice"));
                }
            }
            // An attempt the tool never applied (the mailer, asked about
            // an ambiguous mail, did not hold its key): the next attempt
            // sends it under its own key.
            (
                EffectStatus::Failed {
                    retryable: true, ..
                },
                EffectKind::Act,
            ) => summary.retried += 1,
            (status, _) => summary.violations.push(format!(
                "run {run}: effect {} is {}, not confirmed",
                entry.key,
                status.name()
            )),
        }
    }
    for step in ["pay", "mail"] {
        if !confirmed.contains_key(step) {
            summary
                .violations
                .push(format!("run {run}: step {step} has no confirmed act"));
        }
    }
    let audit = engine.audit(run)?;
    summary.resumes += audit
        .iter()
        .filter(|e| matches!(e.what, AuditWhat::LeaseAcquired { .. }))
        .filter(|e| e.token.is_some_and(|t| t.0 > 1))
        .count() as u64;
    Ok(confirmed)
}

/// Every application of one tool: once per key, after a durable intent of
/// that key, and exactly the acts the books confirmed for `step`.
fn check_tool(
    engine: &Engine,
    (file, step): (&str, &str),
    applications: &[Application],
    books: &BTreeMap<String, Confirmed>,
    summary: &mut Summary,
) -> actum::Result<()> {
    let mut per_key: BTreeMap<&str, Vec<&Application>> = BTreeMap::new();
    for application in applications {
        per_key
            .entry(&application.key)
            .or_default()
            .push(application);
    }
    summary.violations.extend(applied_twice(file, &per_key));
    for (key, applied) in &per_key {
        let intent = EffectKey::parse(key)
            .ok()
            .map(|k| engine.effect(&k))
            .transpose()?
            .flatten();
        match intent {
            None => summary.violations.push(format!(
                "{file}: {key} was applied without a durable intent in the books"
            )),
            Some(entry) if applied.iter().any(|a| a.time_ms < entry.intended_ms) => {
                summary.violations.push(format!(
                    "{file}: {key} was applied before its intent was written"
                ));
            }
            Some(_) => {}
        }
    }
    for (run, confirmed) in books {
        let Some((key, receipt)) = confirmed.get(step) else {
            continue;
        };
        match per_key.get(key.as_str()).map(Vec::as_slice) {
            Some([one]) if one.receipt == *receipt => {}
            Some([one]) => summary.violations.push(format!(
                "run {run}: the books hold receipt {receipt} for {key}, {file} gave {}",
                one.receipt
            )),
            Some(_) => {}
            None => summary.violations.push(format!(
                "run {run}: {key} is confirmed in the books but {file} never applied it"
            )),
        }
    }
    Ok(())
}

/// The violations of "once per key, once per run" among one tool's
/// applications, grouped by key: a key applied more than once (named,
/// with how many times), and a run whose step was applied under more than
/// one key (each attempt's key named).
fn applied_twice(file: &str, per_key: &BTreeMap<&str, Vec<&Application>>) -> Vec<String> {
    let mut violations = Vec::new();
    let mut per_run: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (key, applied) in per_key {
        if applied.len() > 1 {
            violations.push(format!("{file}: {key} was applied {} times", applied.len()));
        }
        let run = key.split('/').next().unwrap_or_default();
        per_run.entry(run).or_default().push(key);
    }
    for (run, keys) in per_run.iter().filter(|(_, keys)| keys.len() > 1) {
        violations.push(format!(
            "{file}: run {run} was applied under {} keys ({}): one act, several attempts",
            keys.len(),
            keys.join(", ")
        ));
    }
    violations
}

/// Each mail quotes the bank receipt of its run's transfer.
fn check_mails_quote_receipts(
    mails: &[Application],
    books: &BTreeMap<String, Confirmed>,
    summary: &mut Summary,
) {
    for mail in mails {
        let run = mail.key.split('/').next().unwrap_or_default();
        let quoted = books
            .get(run)
            .and_then(|c| c.get("pay"))
            .is_some_and(|(_, receipt)| mail.what.ends_with(&format!("bank receipt {receipt}")));
        if !quoted {
            summary.violations.push(format!(
                "mail {} does not quote the bank receipt of run {run}: {:?}",
                mail.key, mail.what
            ));
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (p, t) = (&self.plan, &self.tally);
        writeln!(
            f,
            "actum demo, seed {}: pay an invoice (bank transfer, confirmation mail, complete)",
            p.seed
        )?;
        writeln!(
            f,
            "  runs        {} of {} completed",
            self.completed, p.runs
        )?;
        writeln!(
            f,
            "  steps       {} effects confirmed ({} per run)",
            self.effects_confirmed, 2
        )?;
        writeln!(
            f,
            "  kills       {} worker processes killed with SIGKILL at random points ({} asked), \
             {} started",
            t.kills, p.kills, t.workers_started
        )?;
        writeln!(
            f,
            "  resumes     {} runs picked up again by a new worker; {} intents resent with \
             their own key; {} attempts found never applied and made again under a new key",
            self.resumes, self.resends, self.retried
        )?;
        writeln!(
            f,
            "  effects     bank applied {} transfers ({} keys), mailer sent {} mails ({} keys)",
            self.transfers.0, self.transfers.1, self.mails.0, self.mails.1
        )?;
        writeln!(
            f,
            "  database    verified: {} WAL records and {} state store rows checked",
            self.wal_records, self.state_rows
        )?;
        writeln!(f, "  time        {:.1} s", self.elapsed.as_secs_f64())?;
        if t.worker_failures > 0 {
            writeln!(
                f,
                "  note        {} worker(s) exited with an error",
                t.worker_failures
            )?;
        }
        if self.passed() {
            return writeln!(
                f,
                "PASS: every side effect was applied exactly once, each after its durable intent"
            );
        }
        writeln!(f, "FAIL: {} invariant violation(s):", self.violations.len())?;
        for v in self.violations.iter().take(VIOLATIONS_SHOWN_MAX) {
            writeln!(f, "  - {v}")?;
        }
        if self.violations.len() > VIOLATIONS_SHOWN_MAX {
            writeln!(
                f,
                "  ... and {} more",
                self.violations.len() - VIOLATIONS_SHOWN_MAX
            )?;
        }
        if !self.worker_log.is_empty() {
            writeln!(f, "worker processes said:\n{}", self.worker_log)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use std::io::Write;

    use actum::books::WorkerId;

    use super::super::parent::create_runs;
    use super::super::rng::Rng;
    use super::super::worker::{Tools, work};
    use super::*;

    fn plan(runs: u32) -> Plan {
        Plan {
            runs,
            kills: 0,
            seed: 7,
            kill_after_ms: (10, 200),
            deadline: Duration::from_secs(60),
        }
    }

    /// A demo directory whose one run a worker carried through, in this
    /// process, with the demo's own tools.
    fn one_run_done() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        create_runs(dir.path(), 1).unwrap();
        let engine = Engine::open_existing(db_dir(dir.path()), EngineOptions::default()).unwrap();
        let tools = Tools::open(dir.path()).unwrap();
        let grant = engine
            .claim_next(&WorkerId::new("t").unwrap(), 60_000)
            .unwrap()
            .unwrap();
        assert!(work(&engine, &tools, &grant, &mut Rng::new(1)).unwrap());
        engine.close().unwrap();
        dir
    }

    fn checked(dir: &Path) -> Summary {
        check(dir, &plan(1), &Tally::default(), Duration::ZERO).unwrap()
    }

    /// Appends to `file` a copy of its application of `key`, with a new
    /// receipt: the tool applied that request a second time.
    fn apply_again(dir: &Path, file: &str, key: &str, receipt: &str) {
        let path = dir.join(file);
        let mut again = read_applications(&path)
            .unwrap()
            .into_iter()
            .find(|a| a.key == key)
            .unwrap();
        again.receipt = receipt.to_string();
        again.time_ms += 1;
        let mut out = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        out.write_all(again.line().as_bytes()).unwrap();
    }

    #[test]
    fn a_run_done_once_passes() {
        let dir = one_run_done();
        let summary = checked(dir.path());
        assert!(summary.passed(), "{summary}");
        assert_eq!((summary.transfers, summary.mails), ((1, 1), (1, 1)));
    }

    #[test]
    fn a_mail_sent_twice_with_one_key_fails_the_check_naming_the_key() {
        let dir = one_run_done();
        apply_again(dir.path(), MAIL_FILE, "invoice-00001/mail/1", "msg-2");
        let summary = checked(dir.path());
        assert!(!summary.passed());
        assert_eq!(summary.mails, (2, 1));
        assert!(
            summary
                .violations
                .contains(&"mail.log: invoice-00001/mail/1 was applied 2 times".to_string()),
            "{:?}",
            summary.violations
        );
        let shown = summary.to_string();
        assert!(shown.contains("FAIL: "), "{shown}");
        assert!(
            shown.contains("invoice-00001/mail/1 was applied 2 times"),
            "{shown}"
        );
    }

    #[test]
    fn a_mail_sent_again_under_a_new_attempt_fails_the_check_naming_both_keys() {
        let dir = one_run_done();
        let mut mails = read_applications(&dir.path().join(MAIL_FILE)).unwrap();
        let mut second = mails.remove(0);
        second.key = "invoice-00001/mail/2".into();
        second.receipt = "msg-2".into();
        let path = dir.path().join(MAIL_FILE);
        let mut out = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        out.write_all(second.line().as_bytes()).unwrap();
        let summary = checked(dir.path());
        assert!(
            summary.violations.iter().any(|v| v.contains(
                "run invoice-00001 was applied under 2 keys (invoice-00001/mail/1, \
                 invoice-00001/mail/2)"
            )),
            "{:?}",
            summary.violations
        );
    }
}
