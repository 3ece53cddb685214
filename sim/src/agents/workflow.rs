//! The agents' workflows, drawn from the seeds: the shop (charge the card,
//! ship the order), the refund (ask the model, refund, tell the customer),
//! the treasury end-of-day run (sweep, fund, hedge, post; when the FX desk
//! refuses the hedge, the run fails and its saga undoes the funding, then
//! the sweep), a long research run of
//! journaled model decisions and searches with a growing checkpoint, and
//! vendor onboarding: a 48-hour finance approval of the exact payment, the
//! bank's verification webhook, a sanctions screening whose outcome comes
//! back by webhook (an asynchronous tool: the run waits for the reply with
//! no lease), a week's cooling-off timer, then the payment. A research run ends by starting a child run, the summary (a
//! model call and one more search, paid from the parent's budget), and
//! waits for it: the child's result joins the parent's notes.
//!
//! A workflow is a pure function from where the agent stands (its
//! checkpointed [`AgentState`]) to the next [`Action`], so a worker that
//! resumes from a checkpoint, or re-runs a step whose checkpoint was lost,
//! asks the engine the same questions in the same order.
//!
//! **Invariant:** every action a workflow names is deterministic in (run,
//! state); the books, not the worker's memory, decide what already happened.

use actum::books::{Part, ResourceId, RunId, RunState, SharedKeyId, WaitFor, digest_of};

use crate::world::Tool;
use crate::world::tool;

/// More actions than any workflow's forward path holds.
const FORWARD_ACTIONS_MAX: u32 = 32;
/// Rounds of the research workflow.
pub const RESEARCH_ROUNDS: u32 = 4;
/// Bytes of the static plan every checkpoint carries (stored once).
const PLAN_BYTES: usize = 2_048;
/// Virtual time the simulation starts at (ms since the epoch); the
/// vendor's deadlines are fixed instants after it, so a resumed worker asks
/// for the same wait.
const EPOCH_MS: u64 = super::sim::START_MS;
/// One hour, in ms.
pub const HOUR_MS: u64 = 3_600_000;
/// How long finance has to approve a vendor's payment.
pub const APPROVAL_WINDOW_MS: u64 = 48 * HOUR_MS;
/// The vendor's cooling-off period before its first payment.
pub const COOL_OFF_MS: u64 = 7 * 24 * HOUR_MS;
/// The approver role of the vendor's payment.
pub const FINANCE: &str = "finance";
/// The name of the bank's verification signal.
pub const VERIFIED: &str = "verified";
/// The vendor's screening step: an asynchronous tool, answered by webhook.
pub const SCREEN_STEP: &str = "screen";
/// The step at which a research run starts its summary child.
pub const SUMMARY_STEP: &str = "summarize";

/// A kind of agent run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workflow {
    /// Seed 001/004: charge, then ship.
    Shop,
    /// Seed 000: the model decides, then refund, then mail.
    Refund,
    /// Seed 002: sweep, fund, hedge, post; a refused hedge fails the run,
    /// and its saga undoes the funding, then the sweep.
    Treasury,
    /// Seeds 003/004: a long run of decisions and searches.
    Research,
    /// Seed 003: approval, webhook, screening, cooling-off timer, payment.
    Vendor,
    /// The child a research run starts: a model call and a search, with
    /// no budget of its own (it draws on its parent's).
    Summary,
}

impl Workflow {
    /// Every workflow a schedule starts (a summary is only ever a
    /// research run's child).
    pub const ALL: [Workflow; 5] = [
        Workflow::Shop,
        Workflow::Refund,
        Workflow::Treasury,
        Workflow::Research,
        Workflow::Vendor,
    ];

    /// Its name, the prefix of its runs' ids.
    pub fn name(self) -> &'static str {
        match self {
            Workflow::Shop => "shop",
            Workflow::Refund => "refund",
            Workflow::Treasury => "treasury",
            Workflow::Research => "research",
            Workflow::Vendor => "vendor",
            Workflow::Summary => "summary",
        }
    }

    /// The id of the `index`-th run of a schedule, of this workflow.
    pub fn run_id(self, index: usize) -> RunId {
        RunId::new(format!("{}-{index}", self.name())).expect("a valid run id")
    }
}

/// Why a run left its forward path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failing {
    /// A step was refused for good (the FX desk declined the hedge).
    Declined,
    /// A step's outcome is unknown on a tool that cannot say: a person
    /// must reconcile it; the run stops.
    Unknown,
    /// Finance rejected the payment, or let its approval expire.
    NotApproved,
    /// The child run ended without completing (it failed or was
    /// cancelled).
    ChildFailed,
}

/// Where an agent stands: what its checkpoint holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentState {
    /// The index of the next action on the current path.
    pub cursor: u32,
    /// Set once the run left its forward path.
    pub failing: Option<Failing>,
    /// What the agent learned so far (grows: receipts, decisions).
    pub notes: Vec<u8>,
}

/// One side effect a workflow asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectSpec {
    /// The logical step.
    pub step: String,
    /// The tool.
    pub tool: Tool,
    /// The call's arguments.
    pub args: Vec<u8>,
    /// The compensation registered with it: tool and arguments.
    pub compensation: Option<(Tool, Vec<u8>)>,
    /// The resource the act needs held (a customer contacted): the worker
    /// takes or renews its lease first and sends the act under its token.
    pub resource: Option<ResourceId>,
}

/// What a workflow does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A tool call, through the step ceremony.
    Effect(EffectSpec),
    /// A model call journaled at `position` (replayed, never paid twice).
    Decide {
        /// Position in the run's decision journal.
        position: u64,
        /// The prompt.
        prompt: Vec<u8>,
    },
    /// Wait at a step for an approval, a signal or a timer.
    Wait(WaitSpec),
    /// Start the child run of a step (its workflow is `Summary`) and wait
    /// for its end.
    Spawn {
        /// The step (the child is `<run>:<step>`).
        step: &'static str,
    },
    /// Add the run to the shared registry `key` (a compare-and-set of
    /// the key's run list, read again on a conflict).
    Register {
        /// The registry.
        key: SharedKeyId,
    },
    /// Let the resource's lease go.
    Release {
        /// The resource.
        resource: ResourceId,
    },
    /// Move the run to a terminal state.
    Finish {
        /// Completed or failed.
        to: RunState,
        /// Why.
        reason: &'static str,
    },
}

/// A wait a workflow asks for: its step, what it waits for, its deadline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitSpec {
    /// The waiting step (an approval's is the step of the effect it binds).
    pub step: &'static str,
    /// What it waits for.
    pub wait_for: WaitFor,
    /// When it ends by itself, ms since the epoch.
    pub deadline_ms: Option<u64>,
}

/// The arguments of a vendor run's payment (what finance approves).
pub fn vendor_payment(run: &RunId) -> Vec<u8> {
    format!("pay the first invoice of {run}").into_bytes()
}

fn effect(step: impl Into<String>, tool_name: &str, run: &RunId) -> Action {
    Action::Effect(EffectSpec {
        step: step.into(),
        tool: tool(tool_name),
        args: format!("{tool_name} for {run}").into_bytes(),
        compensation: None,
        resource: None,
    })
}

/// The customer a shop or refund run contacts: the same one for all of
/// them, so they take turns on its lease and race on its registry.
pub fn customer() -> ResourceId {
    ResourceId::new("customer:0").expect("a valid resource name")
}

/// The shared registry of the runs that work for `customer`: their ids,
/// each followed by `;`, each signed in once by its run.
pub fn contacted_key(customer: &ResourceId) -> SharedKeyId {
    let name = customer.as_str().replace(':', "-");
    SharedKeyId::new(format!("contacted:{name}")).expect("a valid shared key")
}

/// The act that contacts the run's customer, under the customer's lease.
fn contact(step: &str, tool_name: &str, run: &RunId) -> Action {
    Action::Effect(EffectSpec {
        step: step.into(),
        tool: tool(tool_name),
        args: format!("{tool_name} for {run}").into_bytes(),
        compensation: None,
        resource: Some(customer()),
    })
}

fn done() -> Action {
    Action::Finish {
        to: RunState::Completed,
        reason: "every step done",
    }
}

impl Workflow {
    /// The next action of a run of this workflow standing at `state`.
    pub fn action(self, run: &RunId, state: &AgentState) -> Action {
        match state.failing {
            Some(Failing::Unknown) => Action::Finish {
                to: RunState::Failed,
                reason: "an effect's outcome is unknown; an operator must reconcile it",
            },
            Some(Failing::NotApproved) => Action::Finish {
                to: RunState::Failed,
                reason: "finance did not approve the payment",
            },
            Some(Failing::ChildFailed) => Action::Finish {
                to: RunState::Failed,
                reason: "the summary run did not complete",
            },
            Some(Failing::Declined) => Action::Finish {
                to: RunState::Failed,
                reason: "the hedge was refused; the saga undoes what the run did",
            },
            None => self.forward(run, state.cursor),
        }
    }

    /// The effect the workflow's forward path makes at `step`, if any: what
    /// a saga resends or queries to learn the outcome of an act in flight.
    pub fn effect_at(self, run: &RunId, step: &str) -> Option<EffectSpec> {
        (0..FORWARD_ACTIONS_MAX).find_map(|cursor| match self.forward(run, cursor) {
            Action::Effect(spec) if spec.step == step => Some(spec),
            _ => None,
        })
    }

    /// The cursor of the act that contacts the customer, for the shop and
    /// the refund.
    fn contact_at(self) -> u32 {
        match self {
            Workflow::Refund => 3,
            _ => 2,
        }
    }

    fn forward(self, run: &RunId, cursor: u32) -> Action {
        match (self, cursor) {
            // First the run signs in the customer's registry: runs of one
            // customer start together and race on it; compare-and-set
            // keeps every one.
            (Workflow::Shop | Workflow::Refund, 0) => Action::Register {
                key: contacted_key(&customer()),
            },
            (Workflow::Shop | Workflow::Refund, c) if c == self.contact_at() + 1 => {
                Action::Release {
                    resource: customer(),
                }
            }
            (Workflow::Shop, 1) => effect("charge", "stripe.charge", run),
            (Workflow::Shop, 2) => contact("ship", "warehouse.ship", run),
            (Workflow::Refund, 1) => Action::Decide {
                position: 0,
                prompt: format!("should {run} be refunded?").into_bytes(),
            },
            (Workflow::Refund, 2) => effect("refund", "bank.refund", run),
            (Workflow::Refund, 3) => contact("email", "mail.send", run),
            (Workflow::Treasury, 0) => Action::Effect(EffectSpec {
                step: "sweep".into(),
                tool: tool("bank.sweep"),
                args: format!("sweep excess cash of {run}").into_bytes(),
                compensation: Some((
                    tool("bank.unsweep"),
                    format!("return the sweep of {run}").into_bytes(),
                )),
                resource: None,
            }),
            (Workflow::Treasury, 1) => Action::Effect(EffectSpec {
                step: "fund".into(),
                tool: tool("bank.fund"),
                args: format!("fund the subsidiaries of {run}").into_bytes(),
                compensation: Some((
                    tool("bank.unfund"),
                    format!("return the funding of {run}").into_bytes(),
                )),
                resource: None,
            }),
            (Workflow::Treasury, 2) => effect("hedge", "fx.hedge", run),
            (Workflow::Treasury, 3) => effect("post", "ledger.post", run),
            (Workflow::Research, c) if c < 2 * RESEARCH_ROUNDS => {
                let round = c / 2;
                if c % 2 == 0 {
                    Action::Decide {
                        position: u64::from(round),
                        prompt: format!("what should {run} search in round {round}?").into_bytes(),
                    }
                } else {
                    effect(format!("search-{round}"), "search.query", run)
                }
            }
            (Workflow::Research, c) if c == 2 * RESEARCH_ROUNDS => {
                Action::Spawn { step: SUMMARY_STEP }
            }
            (Workflow::Summary, 0) => Action::Decide {
                position: 0,
                prompt: format!("summarize the notes of {run}").into_bytes(),
            },
            (Workflow::Summary, 1) => effect("cite", "search.query", run),
            (Workflow::Vendor, 0) => Action::Wait(WaitSpec {
                step: "pay",
                wait_for: WaitFor::Approval {
                    args_digest: digest_of(&vendor_payment(run)),
                    role: FINANCE.to_string(),
                },
                deadline_ms: Some(EPOCH_MS + APPROVAL_WINDOW_MS),
            }),
            (Workflow::Vendor, 1) => Action::Wait(WaitSpec {
                step: "verify-bank",
                wait_for: WaitFor::Signal {
                    name: VERIFIED.to_string(),
                },
                deadline_ms: None,
            }),
            (Workflow::Vendor, 2) => Action::Effect(EffectSpec {
                step: SCREEN_STEP.into(),
                tool: tool("kyc.screen"),
                args: format!("screen the owners of {run}").into_bytes(),
                compensation: None,
                resource: None,
            }),
            (Workflow::Vendor, 3) => Action::Wait(WaitSpec {
                step: "cool-off",
                wait_for: WaitFor::Timer,
                deadline_ms: Some(EPOCH_MS + COOL_OFF_MS),
            }),
            (Workflow::Vendor, 4) => Action::Effect(EffectSpec {
                step: "pay".into(),
                tool: tool("bank.pay"),
                args: vendor_payment(run),
                compensation: None,
                resource: None,
            }),
            _ => done(),
        }
    }
}

impl AgentState {
    /// The checkpoint parts of this state under schema 1 (schema 2 is in
    /// `migration`): the cursor, the notes, and a static plan (unchanged,
    /// so stored once by digest).
    pub fn parts(&self, workflow: Workflow) -> Vec<Part> {
        let failing = match self.failing {
            None => 0,
            Some(Failing::Declined) => 1,
            Some(Failing::Unknown) => 2,
            Some(Failing::NotApproved) => 3,
            Some(Failing::ChildFailed) => 4,
        };
        let mut cursor = self.cursor.to_le_bytes().to_vec();
        cursor.push(failing);
        let mut plan = format!("the plan of every {} run ", workflow.name()).into_bytes();
        plan.resize(PLAN_BYTES, b'.');
        vec![
            Part {
                name: "cursor".into(),
                bytes: cursor,
                extends: None,
                inline: false,
            },
            Part {
                name: "notes".into(),
                bytes: self.notes.clone(),
                extends: None,
                inline: false,
            },
            Part {
                name: "plan".into(),
                bytes: plan,
                extends: None,
                inline: false,
            },
        ]
    }

    /// The state the parts of a checkpoint hold; `None` if they are not
    /// ones [`AgentState::parts`] wrote.
    pub fn from_parts(parts: &[Part]) -> Option<AgentState> {
        let cursor = parts.iter().find(|p| p.name == "cursor")?;
        let notes = parts.iter().find(|p| p.name == "notes")?;
        let (number, flag) = cursor.bytes.split_first_chunk::<4>()?;
        let failing = match flag {
            [0] => None,
            [1] => Some(Failing::Declined),
            [2] => Some(Failing::Unknown),
            [3] => Some(Failing::NotApproved),
            [4] => Some(Failing::ChildFailed),
            _ => return None,
        };
        Some(AgentState {
            cursor: u32::from_le_bytes(*number),
            failing,
            notes: notes.bytes.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_through_checkpoint_parts() {
        let state = AgentState {
            cursor: 3,
            failing: Some(Failing::Declined),
            notes: b"receipt".to_vec(),
        };
        let parts = state.parts(Workflow::Treasury);
        assert_eq!(AgentState::from_parts(&parts), Some(state));
    }

    #[test]
    fn every_workflow_ends_in_a_terminal_state() {
        for workflow in Workflow::ALL.into_iter().chain([Workflow::Summary]) {
            let run = workflow.run_id(0);
            let mut state = AgentState::default();
            let mut steps = 0;
            while !matches!(workflow.action(&run, &state), Action::Finish { .. }) {
                state.cursor += 1;
                steps += 1;
                assert!(steps < 20, "{workflow:?} never finishes");
            }
            let failing = AgentState {
                failing: Some(Failing::Declined),
                ..AgentState::default()
            };
            assert!(
                matches!(
                    workflow.action(&run, &failing),
                    Action::Finish {
                        to: RunState::Failed,
                        ..
                    }
                ),
                "{workflow:?}"
            );
        }
    }
}
