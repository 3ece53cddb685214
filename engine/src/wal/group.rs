//! The group-commit kernel: leader/follower handoff without a background
//! thread, generic over the flush function so loom can check it.
//!
//! Appenders enqueue under one mutex and receive contiguous LSNs in enqueue
//! order. If no leader is active, the appender becomes the leader: it takes
//! the whole queue, releases the mutex, flushes (write + one `fdatasync`),
//! re-locks, publishes the new durable LSN, wakes everyone and steps down.
//! While it flushes, the next group forms in the queue; a woken follower
//! whose LSN is not yet durable becomes the next leader.
//!
//! **Invariant:** `append` returns `Ok(lsn)` only once `lsn <= durable_lsn`;
//! the durable LSN only grows, by whole groups; after a flush error the
//! kernel is poisoned and every pending and later append fails.

use crate::ids::Lsn;
use crate::sync::{Condvar, Mutex};

/// One queued batch: its LSN range and the caller's data.
#[derive(Debug)]
pub struct Entry<T> {
    /// LSN of the batch's first record.
    pub first: Lsn,
    /// LSN of the batch's last record.
    pub last: Lsn,
    /// The batch itself.
    pub item: T,
}

#[derive(Debug)]
struct Queue<T, C> {
    pending: Vec<Entry<T>>,
    next_lsn: Lsn,
    durable_lsn: Lsn,
    leader_active: bool,
    poison: Option<C>,
}

/// The kernel: a queue of batches plus the writer state `W` that only the
/// active leader touches; `C` is the cause a failed flush poisons it with,
/// handed to every later caller (the log's is the flush's own error).
#[derive(Debug)]
pub struct GroupCommit<T, W, C = String> {
    queue: Mutex<Queue<T, C>>,
    turn: Condvar,
    writer: Mutex<W>,
}

impl<T, W, C: Clone> GroupCommit<T, W, C> {
    /// A kernel whose records up to `durable_lsn` are already durable.
    pub fn new(writer: W, durable_lsn: Lsn) -> Self {
        GroupCommit {
            queue: Mutex::new(Queue {
                pending: Vec::new(),
                next_lsn: durable_lsn.next(),
                durable_lsn,
                leader_active: false,
                poison: None,
            }),
            turn: Condvar::new(),
            writer: Mutex::new(writer),
        }
    }

    /// The highest LSN known durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.queue.lock().expect("wal queue lock").durable_lsn
    }

    /// The LSN the next enqueued record will get.
    pub fn next_lsn(&self) -> Lsn {
        self.queue.lock().expect("wal queue lock").next_lsn
    }

    /// The poison cause, if a flush has failed.
    pub fn poison(&self) -> Option<C> {
        self.queue.lock().expect("wal queue lock").poison.clone()
    }

    /// Stops the kernel if it is settled at `durable`: every record up to
    /// it durable, none queued or being flushed, none enqueued since, and
    /// no poison. Every later enqueue then fails with `cause`, as after a
    /// failed flush. Returns whether it stopped; if not, nothing changed.
    pub fn stop_if_settled_at(&self, durable: Lsn, cause: C) -> bool {
        let mut queue = self.queue.lock().expect("wal queue lock");
        let settled = queue.poison.is_none()
            && !queue.leader_active
            && queue.pending.is_empty()
            && queue.durable_lsn == durable;
        if settled {
            // With no batch queued or in flight, every LSN handed out is
            // durable.
            assert_eq!(queue.next_lsn, durable.next(), "nothing in flight");
            queue.poison = Some(cause);
        }
        assert!(!settled || queue.poison.is_some());
        settled
    }

    /// Enqueues `item` holding `count` records and waits until it is
    /// durable, leading a flush if no one else is. `flush` receives the
    /// writer, the group (in LSN order) and the durable LSN at its start
    /// (the ack watermark); its `Err` is the poison cause. Returns the LSN of
    /// the item's last record.
    #[cfg(test)]
    pub fn append<F>(&self, item: T, count: u64, flush: F) -> Result<Lsn, C>
    where
        F: FnOnce(&mut W, &[Entry<T>], Lsn) -> Result<(), C>,
    {
        let last = self.enqueue(item, count)?;
        self.wait_durable(last, flush)
    }

    /// Enqueues `item` holding `count` records without waiting; returns the
    /// LSN of its last record. LSNs are assigned in enqueue order, so a
    /// caller that enqueues under its own lock fixes the log order.
    pub fn enqueue(&self, item: T, count: u64) -> Result<Lsn, C> {
        assert!(count >= 1, "a batch holds at least one record");
        let mut queue = self.queue.lock().expect("wal queue lock");
        if let Some(cause) = &queue.poison {
            return Err(cause.clone());
        }
        let first = queue.next_lsn;
        let last = Lsn(first.0.checked_add(count - 1).expect("LSN space exhausted"));
        queue.next_lsn = last.next();
        queue.pending.push(Entry { first, last, item });
        assert!(queue.durable_lsn < first, "a new batch is not yet durable");
        Ok(last)
    }

    /// Waits until `last` (an LSN `enqueue` returned) is durable, leading a
    /// flush when no leader is active; see [`GroupCommit::append`].
    pub fn wait_durable<F>(&self, last: Lsn, flush: F) -> Result<Lsn, C>
    where
        F: FnOnce(&mut W, &[Entry<T>], Lsn) -> Result<(), C>,
    {
        let mut flush = Some(flush);
        let mut queue = self.queue.lock().expect("wal queue lock");
        assert!(last < queue.next_lsn, "waiting for an LSN never enqueued");
        // Each pass either returns, leads one flush, or waits for a leader to
        // finish; the number of passes is bounded by the groups ahead of us.
        loop {
            if queue.durable_lsn >= last {
                return Ok(last);
            }
            if let Some(cause) = &queue.poison {
                return Err(cause.clone());
            }
            if queue.leader_active {
                queue = self.turn.wait(queue).expect("wal queue lock");
                continue;
            }
            // No leader and our batch is not durable: it is still queued.
            assert!(
                queue.pending.first().is_some_and(|e| e.first <= last),
                "an unflushed batch must still be in the queue"
            );
            queue.leader_active = true;
            let group = std::mem::take(&mut queue.pending);
            let ack = queue.durable_lsn;
            drop(queue);
            let result = {
                let mut writer = self.writer.lock().expect("wal writer lock");
                let flush = flush.take().expect("a caller leads at most once");
                flush(&mut writer, &group, ack)
            };
            queue = self.queue.lock().expect("wal queue lock");
            queue.leader_active = false;
            match result {
                Ok(()) => {
                    let group_last = group.last().expect("group holds our batch").last;
                    assert!(group_last > queue.durable_lsn && group_last >= last);
                    queue.durable_lsn = group_last;
                }
                Err(cause) => queue.poison = Some(cause),
            }
            self.turn.notify_all();
        }
    }

    /// Runs `f` on the writer state, waiting for an active flush to finish.
    pub fn with_writer<R>(&self, f: impl FnOnce(&mut W) -> R) -> R {
        let mut writer = self.writer.lock().expect("wal writer lock");
        f(&mut writer)
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_failed_flush_poisons_every_later_append() {
        let kernel: GroupCommit<u8, Vec<Lsn>> = GroupCommit::new(Vec::new(), Lsn::ZERO);
        let ok = kernel.append(1, 2, |w, group, ack| {
            w.push(group[0].last);
            assert_eq!(ack, Lsn::ZERO);
            Ok(())
        });
        assert_eq!(ok, Ok(Lsn(2)));
        let failed = kernel.append(2, 1, |_, _, _| Err("disk on fire".to_string()));
        assert_eq!(failed, Err("disk on fire".to_string()));
        let later = kernel.append(3, 1, |_, _, _| Ok(()));
        assert_eq!(later, Err("disk on fire".to_string()));
        assert_eq!(kernel.durable_lsn(), Lsn(2));
        assert_eq!(kernel.with_writer(|w| w.clone()), vec![Lsn(2)]);
    }

    #[test]
    fn a_kernel_stops_only_when_settled_at_the_lsn_named() {
        let kernel: GroupCommit<u8, ()> = GroupCommit::new((), Lsn::ZERO);
        assert_eq!(kernel.append(1, 2, |_, _, _| Ok(())), Ok(Lsn(2)));
        assert!(!kernel.stop_if_settled_at(Lsn(1), "closed".to_string()));
        assert_eq!(kernel.enqueue(2, 1), Ok(Lsn(3)));
        assert!(
            !kernel.stop_if_settled_at(Lsn(2), "closed".to_string()),
            "a batch is queued"
        );
        assert_eq!(kernel.wait_durable(Lsn(3), |_, _, _| Ok(())), Ok(Lsn(3)));
        assert!(kernel.stop_if_settled_at(Lsn(3), "closed".to_string()));
        assert_eq!(kernel.enqueue(3, 1), Err("closed".to_string()));
        assert!(!kernel.stop_if_settled_at(Lsn(3), "again".to_string()));
        assert_eq!(kernel.poison(), Some("closed".to_string()));
    }

    #[test]
    fn concurrent_appends_share_flushes() {
        let kernel: Arc<GroupCommit<u64, u64>> = Arc::new(GroupCommit::new(0, Lsn::ZERO));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let kernel = Arc::clone(&kernel);
                std::thread::spawn(move || {
                    (0..200)
                        .map(|_| {
                            kernel
                                .append(0, 1, |flushes, _, _| {
                                    *flushes += 1;
                                    std::thread::yield_now();
                                    Ok(())
                                })
                                .expect("append")
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<Lsn> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect();
        all.sort();
        assert_eq!(all, (1..=1600).map(Lsn).collect::<Vec<_>>());
        assert!(kernel.with_writer(|f| *f) <= 1600);
    }
}

#[cfg(all(test, feature = "loom"))]
mod loom_model {
    use super::*;
    use crate::sync::Arc;

    /// Writer state of the model: every LSN flushed so far, in order.
    type Flushed = Vec<Lsn>;

    #[test]
    fn handoff_makes_every_append_durable_gap_free_without_lost_wakeups() {
        loom::model(|| {
            let kernel: Arc<GroupCommit<u8, Flushed>> =
                Arc::new(GroupCommit::new(Vec::new(), Lsn::ZERO));
            let threads: Vec<_> = (0..2u64)
                .map(|t| {
                    let kernel = Arc::clone(&kernel);
                    loom::thread::spawn(move || {
                        let count = t + 1;
                        let last = kernel
                            .append(0, count, |flushed, group, ack| {
                                assert_eq!(flushed.last().copied().unwrap_or(Lsn::ZERO), ack);
                                for entry in group {
                                    for lsn in entry.first.0..=entry.last.0 {
                                        flushed.push(Lsn(lsn));
                                    }
                                }
                                Ok(())
                            })
                            .expect("no flush fails in this model");
                        // Durable before return, from the published state.
                        assert!(kernel.durable_lsn() >= last);
                        (last, count)
                    })
                })
                .collect();
            let mine = kernel
                .append(0, 1, |flushed, group, _| {
                    for entry in group {
                        for lsn in entry.first.0..=entry.last.0 {
                            flushed.push(Lsn(lsn));
                        }
                    }
                    Ok(())
                })
                .expect("append");
            assert!(kernel.durable_lsn() >= mine);
            let mut ranges = vec![(mine, 1)];
            for thread in threads {
                ranges.push(thread.join().expect("join"));
            }
            let mut lsns: Vec<u64> = ranges
                .iter()
                .flat_map(|&(last, count)| (last.0 + 1 - count)..=last.0)
                .collect();
            lsns.sort_unstable();
            assert_eq!(lsns, (1..=4).collect::<Vec<_>>(), "unique and gap-free");
            let flushed = kernel.with_writer(|w| w.clone());
            assert_eq!(flushed, (1..=4).map(Lsn).collect::<Vec<_>>());
            assert_eq!(kernel.durable_lsn(), Lsn(4));
        });
    }
}
