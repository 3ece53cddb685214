//! Command combining: one caller decides a batch of everyone's commands, so
//! a burst of concurrent callers costs one pass through the engine lock and
//! one wake-up each, not a queue of lock hand-offs.
//!
//! A caller puts its command in `incoming` and tries to take the combining
//! role. The holder drains `incoming` in order and `decide`s each batch
//! (the engine: under its lock, decide and log every command); a decision
//! is either final (a refusal) or pending (a logged record that must become
//! durable). Once `incoming` is empty the holder releases the role, then
//! `settle`s everything it left pending (the engine: one wait for the
//! group commit covering all of it) and wakes each owner with its result.
//! While it waits for the disk, the next caller takes the role and decides
//! the next batch: deciding and syncing overlap, as in group commit.
//!
//! A caller that finds the role taken parks. It counts on the holder: a
//! holder lets go of the role only while it holds `incoming` locked and
//! sees it empty, so a command pushed before that was drained by it, and one
//! pushed after finds the role free (or held by a holder bound by the same
//! rule). The loom model below checks the hand-offs, decisions and wake-ups.
//!
//! **Invariant:** every submitted command is decided exactly once, in
//! submission order among those one holder drains, and its owner returns
//! exactly the result its decision (and settlement) produced; a holder that
//! panics completes every command it took with `abandoned()`.

use std::sync::TryLockError;

use crate::sync::{Arc, Mutex, Thread, current, park};

/// What deciding one command produced.
#[derive(Debug)]
pub(crate) enum Decision<R, P> {
    /// The result, final now (its owner is woken at once).
    Done(R),
    /// Work to settle once the role is released (its owner waits for it).
    Pending(P),
}

/// One submitted command and the slot its result goes in.
struct Slot<C, R> {
    cmd: Mutex<Option<C>>,
    result: Mutex<Option<R>>,
    owner: Thread,
}

impl<C, R> Slot<C, R> {
    fn complete(&self, result: R) {
        let mut slot = self.result.lock().expect("combining slot lock");
        assert!(slot.is_none(), "a command is completed once");
        *slot = Some(result);
        drop(slot);
        self.owner.unpark();
    }

    fn take_result(&self) -> Option<R> {
        self.result.lock().expect("combining slot lock").take()
    }
}

/// The combining kernel, generic over commands `C` and results `R`.
pub(crate) struct Combiner<C, R> {
    incoming: Mutex<Vec<Arc<Slot<C, R>>>>,
    role: Mutex<()>,
}

impl<C, R> std::fmt::Debug for Combiner<C, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combiner").finish_non_exhaustive()
    }
}

impl<C, R> Default for Combiner<C, R> {
    fn default() -> Self {
        Combiner {
            incoming: Mutex::new(Vec::new()),
            role: Mutex::new(()),
        }
    }
}

/// The commands a holder took and has not completed yet; completed with
/// `abandoned()` if the holder unwinds, so no owner parks forever.
struct Taken<'a, C, R> {
    slots: Vec<Arc<Slot<C, R>>>,
    abandoned: &'a dyn Fn() -> R,
}

impl<C, R> Drop for Taken<'_, C, R> {
    fn drop(&mut self) {
        for slot in self.slots.drain(..) {
            slot.complete((self.abandoned)());
        }
    }
}

impl<C, R> Combiner<C, R> {
    /// Submits `cmd` and returns its result. While this caller holds the
    /// role it calls `decide` on batches of commands (its own and others',
    /// in submission order; the returned decisions in the same order) and,
    /// after releasing the role, `settle` on everything it left pending
    /// (results in the same order). `abandoned` is the result of a command
    /// whose holder panicked.
    pub(crate) fn submit<P>(
        &self,
        cmd: C,
        decide: &mut dyn FnMut(Vec<C>) -> Vec<Decision<R, P>>,
        settle: &mut dyn FnMut(Vec<P>) -> Vec<R>,
        abandoned: &dyn Fn() -> R,
    ) -> R {
        let mine = Arc::new(Slot {
            cmd: Mutex::new(Some(cmd)),
            result: Mutex::new(None),
            owner: current(),
        });
        self.incoming
            .lock()
            .expect("combining queue lock")
            .push(Arc::clone(&mine));
        loop {
            if let Some(result) = mine.take_result() {
                return result;
            }
            match self.role.try_lock() {
                Ok(role) => self.lead(role, decide, settle, abandoned),
                // A holder panicked; its commands were abandoned, and the
                // role itself guards no data.
                Err(TryLockError::Poisoned(role)) => {
                    self.lead(role.into_inner(), decide, settle, abandoned);
                }
                // The holder looks at `incoming` after it lets go of the role.
                Err(TryLockError::WouldBlock) => {}
            }
            if let Some(result) = mine.take_result() {
                return result;
            }
            // Whoever holds our command completes it and wakes us (a
            // holder drains `incoming` until it is empty, so after leading,
            // ours was taken by another holder).
            park();
        }
    }

    /// Holds the role while `incoming` has commands, deciding them; then
    /// settles what it left pending and completes it.
    fn lead<P>(
        &self,
        role: crate::sync::MutexGuard<'_, ()>,
        decide: &mut dyn FnMut(Vec<C>) -> Vec<Decision<R, P>>,
        settle: &mut dyn FnMut(Vec<P>) -> Vec<R>,
        abandoned: &dyn Fn() -> R,
    ) {
        let mut taken = Taken {
            slots: Vec::new(),
            abandoned,
        };
        let mut pending = Vec::new();
        let mut role = Some(role);
        loop {
            let mut incoming = self.incoming.lock().expect("combining queue lock");
            if incoming.is_empty() {
                // Let go of the role while `incoming` is locked: a caller
                // pushes either before this (and we drained it) or after
                // (and finds the role free, or held by someone who will
                // drain it), so no command is left with no one to decide it.
                drop(role.take());
                break;
            }
            let batch = std::mem::take(&mut *incoming);
            drop(incoming);
            let first_new = taken.slots.len();
            let cmds = batch
                .iter()
                .map(|slot| {
                    slot.cmd
                        .lock()
                        .expect("combining slot lock")
                        .take()
                        .expect("a command is taken once")
                })
                .collect();
            taken.slots.extend(batch);
            let decisions = decide(cmds);
            assert_eq!(
                decisions.len(),
                taken.slots.len() - first_new,
                "one decision per command"
            );
            // Finished slots are completed now; pending ones keep their
            // place in `taken` (in order) until settled.
            let mut kept = taken.slots.split_off(first_new);
            // (Room for this batch only: a decision is a few hundred bytes,
            // and a vector grown by doubling from four would pass the size
            // the allocator's per-thread cache serves, at every command.)
            pending.reserve_exact(decisions.len());
            for (slot, decision) in kept.drain(..).zip(decisions) {
                match decision {
                    Decision::Done(result) => slot.complete(result),
                    Decision::Pending(work) => {
                        taken.slots.push(slot);
                        pending.push(work);
                    }
                }
            }
        }
        assert!(role.is_none(), "the role is released before settling");
        if pending.is_empty() {
            return;
        }
        let results = settle(pending);
        assert_eq!(results.len(), taken.slots.len(), "one result per command");
        for (slot, result) in taken.slots.drain(..).zip(results) {
            slot.complete(result);
        }
    }
}

#[cfg(all(test, not(feature = "loom")))]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;

    #[test]
    fn every_command_gets_its_own_result_across_threads() {
        let combiner: Combiner<u64, u64> = Combiner::default();
        let decided = std::sync::Mutex::new(Vec::new());
        let results: Vec<Vec<(u64, u64)>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8u64)
                .map(|t| {
                    let combiner = &combiner;
                    let decided = &decided;
                    scope.spawn(move || {
                        (0..200u64)
                            .map(|i| {
                                let cmd = t * 1000 + i;
                                let result = combiner.submit(
                                    cmd,
                                    &mut |cmds| {
                                        decided.lock().unwrap().extend(cmds.iter().copied());
                                        cmds.into_iter()
                                            .map(|c| {
                                                if c % 7 == 0 {
                                                    Decision::Done(c + 1)
                                                } else {
                                                    Decision::Pending(c)
                                                }
                                            })
                                            .collect()
                                    },
                                    &mut |pending| pending.into_iter().map(|c| c * 2).collect(),
                                    &|| u64::MAX,
                                );
                                (cmd, result)
                            })
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (cmd, result) in results.into_iter().flatten() {
            let expected = if cmd % 7 == 0 { cmd + 1 } else { cmd * 2 };
            assert_eq!(result, expected, "command {cmd}");
        }
        let mut decided = decided.into_inner().unwrap();
        decided.sort_unstable();
        let mut all: Vec<u64> = (0..8u64)
            .flat_map(|t| (0..200).map(move |i| t * 1000 + i))
            .collect();
        all.sort_unstable();
        assert_eq!(decided, all, "each command decided exactly once");
    }

    #[test]
    fn a_panicking_holder_abandons_what_it_took_and_wakes_its_owners() {
        let combiner: Combiner<u64, u64> = Combiner::default();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            combiner.submit(
                1,
                &mut |_cmds| -> Vec<Decision<u64, u64>> { panic!("a bug in decide") },
                &mut |p| p,
                &|| u64::MAX,
            )
        }));
        assert!(caught.is_err());
        // The combiner stays usable; nothing is left queued.
        let ok = combiner.submit(
            2,
            &mut |cmds| cmds.into_iter().map(Decision::Pending).collect(),
            &mut |p| p,
            &|| u64::MAX,
        );
        assert_eq!(ok, 2);
    }
}

#[cfg(all(test, feature = "loom"))]
#[allow(clippy::unwrap_used, reason = "tests fail loudly")]
mod loom_model {
    use super::*;

    /// Three callers submit at once; whoever holds the role decides for
    /// the others. Loom reports a deadlock if any owner parks with no one
    /// left to wake it (a stranded command).
    #[test]
    fn every_command_is_decided_once_and_its_owner_woken_with_its_result() {
        // Three threads: a bound of 4 explores in seconds (5 takes ten
        // times longer); planted lost wake-ups are caught from 1.
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(builder.preemption_bound.map_or(4, |b| b.min(4)));
        builder.check(|| {
            let combiner: Arc<Combiner<u64, u64>> = Arc::new(Combiner::default());
            let decided: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(Vec::new()));
            let submit = |combiner: &Combiner<u64, u64>, decided: &Mutex<Vec<u64>>, cmd: u64| {
                combiner.submit(
                    cmd,
                    &mut |cmds| {
                        decided.lock().unwrap().extend(cmds.iter().copied());
                        cmds.into_iter()
                            .map(|c| {
                                if c == 2 {
                                    Decision::Done(c + 100)
                                } else {
                                    Decision::Pending(c)
                                }
                            })
                            .collect()
                    },
                    &mut |pending| pending.into_iter().map(|c| c * 10).collect(),
                    &|| u64::MAX,
                )
            };
            let threads: Vec<_> = (1..=2u64)
                .map(|cmd| {
                    let combiner = Arc::clone(&combiner);
                    let decided = Arc::clone(&decided);
                    loom::thread::spawn(move || submit(&combiner, &decided, cmd))
                })
                .collect();
            assert_eq!(submit(&combiner, &decided, 3), 30);
            let results: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            assert_eq!(results, vec![10, 102]);
            let mut decided = decided.lock().unwrap().clone();
            decided.sort_unstable();
            assert_eq!(decided, vec![1, 2, 3], "each decided exactly once");
        });
    }
}
