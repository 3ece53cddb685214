//! [`ClaimIndex`]: the claimable runs in claim order (claimable since, then
//! id), kept apart by agent version, so a worker that claims for some
//! agents walks their runs only. A runtime polling for its agent beside
//! thousands of runs of another (a LangGraph saver's threads, which no
//! worker claims) would otherwise pass each of them by on every poll, under
//! the engine lock.
//!
//! Agent versions are numbered in the order the index first meets them;
//! the numbers are the index's own (never stored), and a visit merges the
//! agents' entries by `(from_ms, id)`, so the order a visit sees does not
//! depend on them.
//!
//! **Invariant:** each run is in at most one agent's set, at most once;
//! `agents` and `sets` have one entry per number.

use std::collections::btree_set;
use std::collections::{BTreeMap, BTreeSet};
use std::iter::Peekable;

use crate::books::RunId;

/// Where a run sits in the index: its agent version's number and the
/// instant it is claimable from.
pub(crate) type ClaimSlot = (u32, u64);

/// The claim index (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct ClaimIndex {
    /// Agent version -> its number.
    agents: BTreeMap<String, u32>,
    /// By number: the agent version's claimable runs, `(from_ms, id)`.
    sets: Vec<BTreeSet<(u64, RunId)>>,
    /// The planted `ClaimAgentsInTurn`: a visit walks each agent's set in
    /// turn instead of merging them.
    in_turn: bool,
}

impl ClaimIndex {
    /// An empty index; `in_turn` plants `ClaimAgentsInTurn` (false but in
    /// the simulator's campaigns).
    pub(crate) fn new(in_turn: bool) -> ClaimIndex {
        ClaimIndex {
            in_turn,
            ..ClaimIndex::default()
        }
    }

    /// The number of the agent version `name`, given it on first sight.
    pub(crate) fn agent(&mut self, name: &str) -> u32 {
        if let Some(&number) = self.agents.get(name) {
            return number;
        }
        let number = u32::try_from(self.sets.len()).expect("fewer than 2^32 agent versions");
        self.agents.insert(name.to_string(), number);
        self.sets.push(BTreeSet::new());
        assert_eq!(self.agents.len(), self.sets.len());
        number
    }

    /// Adds `id` under `slot`; false if it was there already.
    pub(crate) fn insert(&mut self, (agent, from_ms): ClaimSlot, id: RunId) -> bool {
        self.sets[agent as usize].insert((from_ms, id))
    }

    /// Removes `id` from `slot`; false if it was not there.
    pub(crate) fn remove(&mut self, (agent, from_ms): ClaimSlot, id: &RunId) -> bool {
        self.sets
            .get_mut(agent as usize)
            .is_some_and(|set| set.remove(&(from_ms, id.clone())))
    }

    /// Calls `visit` with each run claimable at `now_ms` of the agent
    /// versions `serves` accepts (every one if `None`), in claim order,
    /// until it returns `false`.
    pub(crate) fn visit(
        &self,
        now_ms: u64,
        serves: Option<&dyn Fn(&str) -> bool>,
        visit: &mut dyn FnMut(&RunId) -> bool,
    ) {
        let mut heads: Vec<Peekable<btree_set::Iter<'_, (u64, RunId)>>> = self
            .agents
            .iter()
            .filter(|(name, _)| serves.is_none_or(|serves| serves(name)))
            .map(|(_, &number)| self.sets[number as usize].iter().peekable())
            .collect();
        if self.in_turn {
            // The planted bug: each chosen agent's runs in turn, by number.
            let mut numbers: Vec<u32> = self
                .agents
                .iter()
                .filter(|(name, _)| serves.is_none_or(|serves| serves(name)))
                .map(|(_, &number)| number)
                .collect();
            numbers.sort_unstable();
            for number in numbers {
                for (from_ms, id) in &self.sets[number as usize] {
                    if *from_ms > now_ms {
                        break;
                    }
                    if !visit(id) {
                        return;
                    }
                }
            }
            return;
        }
        loop {
            // The head that comes first in claim order (a few agents: a
            // scan of the heads is cheaper than a heap).
            let mut first: Option<(usize, &(u64, RunId))> = None;
            for (at, head) in heads.iter_mut().enumerate() {
                if let Some(entry) = head.peek()
                    && first.is_none_or(|(_, best)| *entry < best)
                {
                    first = Some((at, entry));
                }
            }
            let Some((at, &(from_ms, _))) = first else {
                return;
            };
            if from_ms > now_ms {
                return;
            }
            let (_, id) = heads[at].next().expect("peeked");
            if !visit(id) {
                return;
            }
        }
    }

    /// Every entry, in claim order across agents (for checks).
    #[cfg(test)]
    pub(crate) fn entries(&self) -> Vec<(u64, RunId)> {
        let mut all: Vec<(u64, RunId)> = self.sets.iter().flatten().cloned().collect();
        all.sort();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str) -> RunId {
        RunId::new(name).expect("a valid name")
    }

    fn visited(
        index: &ClaimIndex,
        now_ms: u64,
        serves: Option<&dyn Fn(&str) -> bool>,
    ) -> Vec<String> {
        let mut seen = Vec::new();
        index.visit(now_ms, serves, &mut |run| {
            seen.push(run.to_string());
            true
        });
        seen
    }

    #[test]
    fn a_visit_merges_the_agents_in_claim_order_and_a_served_one_walks_its_own() {
        let mut index = ClaimIndex::default();
        let a = index.agent("a 1");
        let b = index.agent("b 1");
        assert_eq!(index.agent("a 1"), a, "one number per version");
        assert!(index.insert((b, 5), id("b-early")));
        assert!(index.insert((a, 7), id("a-late")));
        assert!(index.insert((a, 5), id("a-early")));
        assert!(index.insert((b, 9), id("b-later")));
        assert!(!index.insert((b, 9), id("b-later")), "once");
        assert_eq!(
            visited(&index, 100, None),
            ["a-early", "b-early", "a-late", "b-later"]
        );
        assert_eq!(visited(&index, 7, None), ["a-early", "b-early", "a-late"]);
        let only_b = |agent: &str| agent == "b 1";
        assert_eq!(visited(&index, 100, Some(&only_b)), ["b-early", "b-later"]);
        let none = |_: &str| false;
        assert!(visited(&index, 100, Some(&none)).is_empty());
        assert!(index.remove((a, 5), &id("a-early")));
        assert!(!index.remove((a, 5), &id("a-early")));
        assert!(!index.remove((b, 7), &id("a-late")), "another agent's slot");
        assert_eq!(index.entries().len(), 3);
        // A visit stops when asked to.
        let mut seen = 0;
        index.visit(100, None, &mut |_| {
            seen += 1;
            false
        });
        assert_eq!(seen, 1);
    }
}
