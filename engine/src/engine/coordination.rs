//! Coordination at the engine's door: resource leases a run holds for a
//! while (two runs never work `customer:42` at once) and shared keys that
//! outlive runs (a do-not-contact flag), both journaled (`books/rules/coord.rs`).
//!
//! **Invariant:** a grant's token is larger than every token the resource
//! handed out before, so a tool that remembers the highest token it saw
//! refuses a stale holder; a shared key changes only through a
//! compare-and-set against the version the setter read.

use crate::books::{
    AcquireResource, Answer, Command, FencingToken, Guard, ReleaseResource, ResourceBook,
    ResourceId, RunId, SetShared, SharedEntry, SharedKeyId, SharedSetter,
};
use crate::error::{Error, Result};

use super::core::Engine;

/// A run's hold of a resource: hand `token` to the tools that act on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceGrant {
    /// The resource.
    pub resource: ResourceId,
    /// The hold's fencing token.
    pub token: FencingToken,
    /// When the hold dies unless renewed, ms since the epoch.
    pub expires_ms: u64,
    /// True if the run held it already (the same token, a later expiry).
    pub renewed: bool,
}

impl Engine {
    /// Takes (or, for its holder, renews) the lease of `resource` for
    /// `run`, under the run's live lease, for `ttl_ms`. `ResourceHeld`
    /// (naming the holder and its expiry) while another run holds it live;
    /// a hold that expired, was released, or whose run ended is free.
    ///
    /// ```
    /// use actum::books::{CreateRun, ResourceId, RunId, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let mut guards = Vec::new();
    /// for name in ["outreach-1", "outreach-2"] {
    ///     let run = RunId::new(name)?;
    ///     engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(name.as_bytes()),
    ///         agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    ///     guards.push((run.clone(), engine.acquire_lease(&run, &WorkerId::new(name)?, 60_000)?.guard));
    /// }
    /// let customer = ResourceId::new("customer:42")?;
    /// let first = engine.acquire_resource(&customer, &guards[0].0, &guards[0].1, 30_000)?;
    /// let refused = engine.acquire_resource(&customer, &guards[1].0, &guards[1].1, 30_000);
    /// assert!(matches!(refused, Err(Error::ResourceHeld { holder, .. }) if holder == guards[0].0));
    /// engine.release_resource(&customer, &guards[0].0, &guards[0].1)?;
    /// let second = engine.acquire_resource(&customer, &guards[1].0, &guards[1].1, 30_000)?;
    /// // The token grows, so a tool can refuse the first holder from now on.
    /// assert!(second.token > first.token);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_resource(
        &self,
        resource: &ResourceId,
        run: &RunId,
        guard: &Guard,
        ttl_ms: u64,
    ) -> Result<ResourceGrant> {
        let cmd = Command::AcquireResource(AcquireResource {
            resource: resource.clone(),
            run: run.clone(),
            guard: guard.clone(),
            ttl_ms,
        });
        match self.answer(cmd)? {
            Answer::ResourceGranted {
                resource,
                token,
                expires_ms,
                renewed,
            } => Ok(ResourceGrant {
                resource,
                token,
                expires_ms,
                renewed,
            }),
            other => Err(unexpected("acquire_resource", &other)),
        }
    }

    /// Gives up `run`'s live hold of `resource`; `ResourceNotHeld` if it
    /// holds none (it expired, or went to another run).
    ///
    /// ```
    /// use actum::books::ResourceId;
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    /// # use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("outreach-3")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"3"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// let customer = ResourceId::new("customer:42")?;
    /// engine.acquire_resource(&customer, &run, &lease.guard, 30_000)?;
    /// engine.release_resource(&customer, &run, &lease.guard)?;
    /// assert!(engine.resource(&customer)?.expect("held once").hold.is_none(), "free for the next run");
    /// // Given up already: there is nothing left to release.
    /// let again = engine.release_resource(&customer, &run, &lease.guard);
    /// assert!(matches!(again, Err(Error::ResourceNotHeld { .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn release_resource(
        &self,
        resource: &ResourceId,
        run: &RunId,
        guard: &Guard,
    ) -> Result<()> {
        let cmd = Command::ReleaseResource(ReleaseResource {
            resource: resource.clone(),
            run: run.clone(),
            guard: guard.clone(),
        });
        match self.answer(cmd)? {
            Answer::ResourceReleased { .. } => Ok(()),
            other => Err(unexpected("release_resource", &other)),
        }
    }

    /// The lease book of `resource` (its latest hold, live or not, and
    /// its next token); `None` if it was never held.
    ///
    /// ```
    /// use actum::books::ResourceId;
    /// use actum::engine::{Engine, EngineOptions};
    /// # use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("outreach-4")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"4"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// let customer = ResourceId::new("customer:43")?;
    /// assert!(engine.resource(&customer)?.is_none(), "never held");
    /// let grant = engine.acquire_resource(&customer, &run, &lease.guard, 30_000)?;
    /// let book = engine.resource(&customer)?.expect("held");
    /// let hold = book.hold.expect("a live hold");
    /// assert_eq!((hold.run, hold.token, hold.expires_ms), (run, grant.token, grant.expires_ms));
    /// assert!(book.next_token > grant.token, "the next holder gets a larger token");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resource(&self, resource: &ResourceId) -> Result<Option<ResourceBook>> {
        self.read(|books| Ok(books.resource(resource)))
    }

    /// The shared key `key` (value, version, latest changes); `None` if it
    /// was never set.
    ///
    /// ```
    /// use actum::books::{SharedKeyId, SharedSetter};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let dnc = SharedKeyId::new("dnc:customer-7")?;
    /// assert!(engine.shared(&dnc)?.is_none(), "never set");
    /// let ops = SharedSetter::Operator { name: "ops-anna".into() };
    /// engine.set_shared(&dnc, 0, Some(b"do not contact".to_vec()), &ops, "asked by email")?;
    /// engine.set_shared(&dnc, 1, None, &ops, "consent given")?;
    /// let entry = engine.shared(&dnc)?.expect("set");
    /// assert_eq!((entry.value, entry.version), (None, 2));
    /// let why: Vec<&str> = entry.changes.iter().map(|c| c.why.as_str()).collect();
    /// assert_eq!(why, ["asked by email", "consent given"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shared(&self, key: &SharedKeyId) -> Result<Option<SharedEntry>> {
        self.read(|books| Ok(books.shared(key)))
    }

    /// Compare-and-set of `key`: `value` (`None` clears it) if the key is
    /// at `expected_version` (0 for a key never set); returns the key's
    /// version after. `SharedVersionConflict` names the version it is at
    /// if someone set it since it was read. Setting the value it holds
    /// writes nothing. `by` is a run under its lease (the change is in its
    /// audit too) or a named operator.
    ///
    /// ```
    /// use actum::books::{SharedKeyId, SharedSetter};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let dnc = SharedKeyId::new("dnc:customer-42")?;
    /// let ops = SharedSetter::Operator { name: "ops-anna".into() };
    /// assert_eq!(engine.set_shared(&dnc, 0, Some(b"do not contact".to_vec()), &ops, "asked by phone")?, 1);
    /// // A writer that read version 0 lost the race: it is told, not overwritten.
    /// let stale = engine.set_shared(&dnc, 0, None, &ops, "clear");
    /// assert!(matches!(stale, Err(Error::SharedVersionConflict { actual: 1, .. })));
    /// let entry = engine.shared(&dnc)?.expect("set");
    /// assert_eq!((entry.version, entry.changes[0].by.as_str()), (1, "ops-anna"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_shared(
        &self,
        key: &SharedKeyId,
        expected_version: u64,
        value: Option<Vec<u8>>,
        by: &SharedSetter,
        reason: &str,
    ) -> Result<u64> {
        let cmd = Command::SetShared(SetShared {
            key: key.clone(),
            expected_version,
            value,
            by: by.clone(),
            reason: reason.to_string(),
        });
        match self.answer(cmd)? {
            Answer::SharedSet { version, .. } => Ok(version),
            other => Err(unexpected("set_shared", &other)),
        }
    }
}

fn unexpected(call: &str, answer: &Answer) -> Error {
    Error::Inconsistent {
        what: format!("{call} answered {answer:?}"),
    }
}
