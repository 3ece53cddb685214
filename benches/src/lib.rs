//! Shared code for actum's criterion benches: a writer harness and the systems it drives.
//!
//! Every system measured by `wal_append` turns one 256-byte record into one durable commit, so
//! the bench compares like with like: raw file loops that show what the disk allows ([`raw`],
//! [`group_commit`]), actum's WAL ([`actum_wal`]), and the peers ([`peers`]). `effect_protocol`
//! runs the engine's two-commit effect protocol against the same systems doing two commits
//! ([`protocol`]); `agent_step` runs whole agent steps and checkpoint saves ([`agent`]), with
//! bytes written counted under the engine ([`counting`]), beside the peers doing a step's
//! durable work ([`peer_step`]), and whole agent runs through the
//! runtime against the same runs by hand ([`runtime`]). The bench files under `benches/` stay
//! thin: they pick a system and a writer count and hand both to [`runner`], which times them
//! with [`harness`]. The `memory_after_runs` example reports resident memory ([`memory`]); `open_time` times an open
//! after a crash against history and tail ([`open`]).
//!
//! **Invariant:** a system's `commit` returns only once what it wrote is durable (the relevant
//! `fsync`/`fdatasync` has returned), so commits per second are durable commits per second.

pub mod actum_wal;
pub mod agent;
pub mod counting;
pub mod group_commit;
pub mod harness;
pub mod memory;
pub mod open;
pub mod peer_step;
pub mod peers;
pub mod protocol;
pub mod raw;
pub mod runner;
pub mod runtime;

/// Size of one record, in bytes, for every system.
pub const RECORD_BYTES: usize = 256;

/// The writer counts every durability bench runs, side by side.
pub const WRITER_COUNTS: [usize; 4] = [1, 4, 16, 64];

/// Environment variable naming the directory benches write into (default: the system temp dir).
/// It must be on the disk being measured: a tmpfs would make every fsync free.
pub const SCRATCH_DIR_ENV: &str = "ACTUM_BENCH_DIR";

/// A fresh, empty directory for one system's files, removed when dropped.
pub fn scratch_dir() -> tempfile::TempDir {
    let parent = std::env::var_os(SCRATCH_DIR_ENV).map_or_else(std::env::temp_dir, Into::into);
    tempfile::Builder::new()
        .prefix("actum-bench-")
        .tempdir_in(&parent)
        .expect("the bench scratch directory must be creatable (see ACTUM_BENCH_DIR)")
}

/// Commits the removal of a dropped system's scratch directory (a directory sync forces the
/// file-system journal commit), so freeing and discarding its blocks is not charged to the next
/// bench. Runs outside any timed region.
pub fn settle_scratch() {
    let parent = std::env::var_os(SCRATCH_DIR_ENV).map_or_else(std::env::temp_dir, Into::into);
    raw::sync_dir(&parent);
}

/// Every file under `dir` with its length, sorted by path (the examples
/// that report a database's files).
pub fn files_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u64)> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    // Bounded by the directory tree, a handful of entries.
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).expect("read_dir") {
            let entry = entry.expect("entry");
            let meta = entry.metadata().expect("metadata");
            if meta.is_dir() {
                todo.push(entry.path());
            } else {
                found.push((entry.path(), meta.len()));
            }
        }
    }
    found.sort();
    found
}

/// A record's payload: 256 bytes derived from its ticket, so no two adjacent records are equal.
pub fn record(ticket: u64) -> [u8; RECORD_BYTES] {
    let mut bytes = [0u8; RECORD_BYTES];
    for (i, chunk) in bytes.chunks_exact_mut(8).enumerate() {
        let word = ticket
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(i as u64);
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    bytes
}

/// Something that commits one record durably and may be called from many threads at once.
pub trait DurableLog: Sync {
    /// Per-thread state (a connection, a scratch buffer); built before the timed region.
    type Writer<'a>
    where
        Self: 'a;

    /// Runs before each sample's threads start, outside the timed region (default: nothing).
    fn before_sample(&self) {}

    /// Builds one writer thread's state. Runs outside the timed region.
    fn writer(&self) -> Self::Writer<'_>;

    /// A one-line summary of how the system got there (e.g. records per fsync), printed after
    /// its bench; `None` if it has nothing to say.
    fn summary(&self) -> Option<String> {
        None
    }

    /// Commits record number `ticket` durably; returns once it would survive a crash.
    fn commit(&self, writer: &mut Self::Writer<'_>, ticket: u64);
}

/// A [`DurableLog`] that also commits rows of any length, several in one transaction: what the
/// peers of a whole agent step write ([`peer_step`]). A system's [`DurableLog::commit`] is this
/// with one [`record`] as its one row, so both paths are one piece of code.
pub trait DurableRows: DurableLog {
    /// Commits `rows` durably as one transaction, row `i` under key `first_key + i`; returns
    /// once all of them would survive a crash, and none is durable without the others.
    fn commit_rows(&self, writer: &mut Self::Writer<'_>, first_key: u64, rows: &[&[u8]]);
}

/// What one iteration of a bench is on a peer, as durable commits of rows: the effect protocol
/// ([`protocol::TwoCommits`]) or an agent step ([`peer_step::AgentStep`]).
///
/// A work is a description, holding no borrows (`'static`), so a peer's writer outlives it.
pub trait PeerWork: Sync + 'static {
    /// Does iteration number `ticket` on `peer`; returns once all of it is durable.
    fn commit<L: DurableRows>(&self, peer: &L, writer: &mut L::Writer<'_>, ticket: u64);

    /// What the work wrote per iteration, added to the peer's summary; `None` to add nothing.
    fn summary(&self) -> Option<String> {
        None
    }
}

/// A peer doing `work` per iteration: the [`DurableLog`] a bench times beside actum.
pub struct OnPeer<W, L> {
    /// The work of one iteration.
    pub work: W,
    /// The system doing it.
    pub peer: L,
}

impl<W, L> OnPeer<W, L> {
    /// `peer` doing `work` per iteration.
    pub fn new(work: W, peer: L) -> OnPeer<W, L> {
        OnPeer { work, peer }
    }
}

impl<W: PeerWork, L: DurableRows> DurableLog for OnPeer<W, L> {
    type Writer<'a>
        = L::Writer<'a>
    where
        Self: 'a;

    fn before_sample(&self) {
        self.peer.before_sample();
    }

    fn writer(&self) -> Self::Writer<'_> {
        self.peer.writer()
    }

    fn summary(&self) -> Option<String> {
        match (self.peer.summary(), self.work.summary()) {
            (Some(peer), Some(work)) => Some(format!("{peer}; {work}")),
            (peer, work) => peer.or(work),
        }
    }

    fn commit(&self, writer: &mut Self::Writer<'_>, ticket: u64) {
        self.work.commit(&self.peer, writer, ticket);
    }
}

/// Runs `each(n, worker)` for every `n` in `from..to`, spread over `threads` threads that take
/// the next number as they finish one (the examples' way of building many runs at once).
pub fn spread(threads: usize, from: u64, to: u64, each: impl Fn(u64, usize) + Sync) {
    assert!(threads > 0 && from <= to, "at least one thread and a range");
    let next = std::sync::atomic::AtomicU64::new(from);
    std::thread::scope(|scope| {
        for worker in 0..threads {
            let (next, each) = (&next, &each);
            scope.spawn(move || {
                // Bounded by `to`: each turn takes a number no other thread takes.
                loop {
                    let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if n >= to {
                        break;
                    }
                    each(n, worker);
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_differ_and_have_the_agreed_size() {
        assert_eq!(record(1).len(), RECORD_BYTES);
        assert_ne!(record(1), record(2));
    }
}
