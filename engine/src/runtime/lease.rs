//! The lease a handler runs under, kept alive: renewed once a third of its
//! time-to-live has passed (by the engine's clock), by the background
//! keeper and by the handler's own next call, whichever comes first; once a
//! renewal is refused the lease is lost for good and the handler stops at
//! its next call.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::books::{Guard, RunId};
use crate::engine::Engine;
use crate::planted::PlantedBug;

/// One held lease.
#[derive(Debug)]
pub(crate) struct LeaseWatch {
    pub(crate) run: RunId,
    pub(crate) guard: Guard,
    ttl_ms: u64,
    expires_ms: AtomicU64,
    lost: AtomicBool,
    /// One renewal at a time (the keeper's and the handler's).
    renewing: Mutex<()>,
}

impl LeaseWatch {
    pub(crate) fn new(run: RunId, guard: Guard, ttl_ms: u64, expires_ms: u64) -> LeaseWatch {
        LeaseWatch {
            run,
            guard,
            ttl_ms,
            expires_ms: AtomicU64::new(expires_ms),
            lost: AtomicBool::new(false),
            renewing: Mutex::new(()),
        }
    }

    /// When the lease runs out unless renewed, ms on the engine's clock.
    pub(crate) fn expires_ms(&self) -> u64 {
        self.expires_ms.load(Ordering::Acquire)
    }

    /// The last instant an act may be sent under this lease: its expiry
    /// less a tenth of its time-to-live, so a send that stalls a little
    /// still lands before a successor can take the run over.
    pub(crate) fn act_deadline_ms(&self) -> u64 {
        self.expires_ms().saturating_sub(self.ttl_ms / 10)
    }

    /// True once a renewal was refused, or the lease was given up.
    pub(crate) fn lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Marks the lease gone (released by a wait, given up, or lost).
    pub(crate) fn let_go(&self) {
        self.lost.store(true, Ordering::Release);
    }

    /// Renews the lease if a third of its time-to-live has passed since it
    /// was granted or last renewed. Returns false if it is lost.
    pub(crate) fn keep(&self, engine: &Engine) -> bool {
        if self.lost() {
            return false;
        }
        let _one = self.renewing.lock().unwrap_or_else(PoisonError::into_inner);
        let now = engine.clock().now_ms();
        let due = self
            .expires_ms()
            .saturating_sub(self.ttl_ms.saturating_mul(2) / 3);
        if now < due || self.lost() {
            return !self.lost();
        }
        match engine.renew_lease(&self.run, &self.guard, self.ttl_ms) {
            Ok(expires) => {
                self.expires_ms.store(expires, Ordering::Release);
                true
            }
            Err(_) if engine.planted(PlantedBug::RenewAfterLoss) => {
                self.expires_ms
                    .store(now.saturating_add(self.ttl_ms), Ordering::Release);
                true
            }
            Err(_) => {
                self.let_go();
                false
            }
        }
    }
}

/// The leases the runtime's handlers hold, for the background keeper.
#[derive(Debug, Default)]
pub(crate) struct Keeper {
    held: Mutex<BTreeMap<RunId, Arc<LeaseWatch>>>,
}

impl Keeper {
    pub(crate) fn hold(&self, watch: Arc<LeaseWatch>) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.insert(watch.run.clone(), watch);
    }

    pub(crate) fn drop_run(&self, run: &RunId) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.remove(run);
    }

    /// Renews every held lease that is due, in run order.
    pub(crate) fn keep_all(&self, engine: &Engine) {
        let watches: Vec<Arc<LeaseWatch>> = {
            let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
            held.values().cloned().collect()
        };
        for watch in watches {
            watch.keep(engine);
        }
    }
}
