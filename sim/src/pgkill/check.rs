//! The kill loop's checks, once every run ended: the world (what the tools
//! did) against the books (what the engine acknowledged), as the agent
//! simulator checks its world.
//!
//! 1. **At most once**: no run's charge applied twice (across the step's
//!    attempts: a later attempt is made only once a query found the
//!    earlier not applied, and fenced it), and no mail key sent twice.
//! 2. **After a durable intent**: every act's key is in the ledger, with
//!    the intent's fencing token the act was made under.
//! 3. **Every run ends**, and a completed run's charge and mail are
//!    confirmed with the receipts the tools gave, for acts the world holds.
//! 4. **Nothing acknowledged is lost**: every step result a handler got
//!    back (`ack`) is a confirmed entry of the ledger.

use std::collections::BTreeMap;

use actum::books::{EffectEntry, EffectStatus, RunId, RunState};
use actum::engine::Engine;

use super::world::{Line, World, charge_receipt, mail_receipt};

/// What the check found.
#[derive(Clone, Debug, Default)]
pub struct Checked {
    /// What went wrong, each naming its run and key.
    pub violations: Vec<String>,
    /// Runs by the state they ended in.
    pub ended: BTreeMap<String, u64>,
    /// Acts the world holds.
    pub acts: u64,
    /// Charges made again under a later attempt after a query found the
    /// first not applied.
    pub charge_retries: u64,
}

/// Checks the world against the books for runs `run-00000` up to
/// `created`.
pub fn check(engine: &Engine, world: &World, created: u64) -> Result<Checked, String> {
    let mut checked = Checked::default();
    for n in 0..created {
        let name = format!("run-{n:05}");
        let run = RunId::new(&name).map_err(|e| e.to_string())?;
        let Some(record) = engine.run(&run).map_err(|e| format!("read {name}: {e}"))? else {
            // Its create was answered: the books lost an acknowledged
            // command (what the planted `PgAnswerBeforeDurable` does when
            // the server crashes before the commit is durable).
            checked.violations.push(format!(
                "{name}: its create was acknowledged and the books do not hold it"
            ));
            continue;
        };
        *checked
            .ended
            .entry(format!("{:?}", record.state).to_lowercase())
            .or_default() += 1;
        let ledger: BTreeMap<String, EffectEntry> = engine
            .effects(&run)
            .map_err(|e| format!("read {name}'s ledger: {e}"))?
            .into_iter()
            .map(|entry| (entry.key.encode(), entry))
            .collect();
        let lines = world
            .lines(&name)
            .map_err(|e| format!("read {name}'s world: {e}"))?;
        check_run(&mut checked, &name, record.state, &ledger, &lines);
    }
    Ok(checked)
}

fn check_run(
    checked: &mut Checked,
    run: &str,
    state: RunState,
    ledger: &BTreeMap<String, EffectEntry>,
    lines: &[Line],
) {
    let mut violations = Vec::new();
    let acts: Vec<(&str, &str, u64)> = lines
        .iter()
        .filter_map(|line| match line {
            Line::Act { tool, key, token } => Some((tool.as_str(), key.as_str(), *token)),
            _ => None,
        })
        .collect();
    checked.acts += acts.len() as u64;
    let charges: Vec<&(&str, &str, u64)> = acts.iter().filter(|(t, ..)| *t == "charge").collect();
    if charges.len() > 1 {
        violations.push(format!(
            "{run}: charged {} times (keys {:?})",
            charges.len(),
            charges.iter().map(|(_, k, _)| *k).collect::<Vec<_>>()
        ));
    }
    let mut mails: BTreeMap<&str, u64> = BTreeMap::new();
    for (tool, key, token) in &acts {
        if *tool == "mail" {
            *mails.entry(key).or_default() += 1;
        }
        match ledger.get(*key) {
            None => violations.push(format!(
                "{run}: {tool} acted under {key} (token {token}) with no intent in the ledger"
            )),
            Some(entry) if *tool == "charge" && entry.token.0 != *token => {
                violations.push(format!(
                    "{run}: charge acted under {key} with token {token}, the intent has token {}",
                    entry.token.0
                ));
            }
            Some(_) => {}
        }
    }
    if let Some((key, times)) = mails.iter().find(|(_, times)| **times > 1) {
        violations.push(format!("{run}: mail {key} sent {times} times"));
    }
    let confirmed = |key: &str, receipt: &[u8]| {
        ledger.get(key).is_some_and(
            |e| matches!(&e.status, EffectStatus::Confirmed { receipt: r } if r == receipt),
        )
    };
    if !state.is_terminal() {
        violations.push(format!("{run}: still {state:?} once the faults stopped"));
    }
    if state == RunState::Completed {
        let charged = ledger
            .values()
            .filter(|e| e.key.step().as_str() == "charge")
            .filter(|e| confirmed(&e.key.encode(), &charge_receipt(&e.key.encode())))
            .count();
        let acted = charges.len();
        if charged != 1 || acted != 1 {
            violations.push(format!(
                "{run}: completed with {charged} confirmed charges in the ledger and {acted} in the world"
            ));
        }
        checked.charge_retries += ledger
            .values()
            .filter(|e| e.key.step().as_str() == "charge" && e.key.attempt() > 1)
            .count() as u64;
    }
    for line in lines {
        if let Line::Ack { step, key } = line {
            let receipt = match step.as_str() {
                "charge" => charge_receipt(key),
                _ => mail_receipt(key),
            };
            if !confirmed(key, &receipt) {
                violations.push(format!(
                    "{run}: the handler got {step}'s result under {key} back, and the ledger \
                     does not hold it confirmed"
                ));
            }
        }
    }
    checked.violations.extend(violations);
}
