//! Behaviour tests for `SimDisk` through the `Storage` trait: durability,
//! faults, power loss, locks, determinism, and redb on top.

use std::io;
use std::path::Path;

use actum::storage::{OpenMode, RedbBackend, Storage};

use super::*;
use crate::rng::{PPM_ONE, Rng};

fn disk(faults: FaultConfig) -> SimDisk {
    SimDisk::new(Rng::new(99), faults)
}

/// A disk with a durable `/db` directory.
fn disk_with_db(faults: FaultConfig) -> SimDisk {
    let disk = disk(faults);
    disk.create_dir_all(Path::new("/db")).expect("mkdir");
    disk.sync_dir(Path::new("/")).expect("sync root");
    disk
}

/// Creates `path` with `data`, synced, and its directory entry synced.
fn durable_file(disk: &SimDisk, path: &str, data: &[u8]) {
    let file = disk
        .open(Path::new(path), OpenMode::CreateNew)
        .expect("create");
    file.write_at(0, data).expect("write");
    file.sync_data().expect("sync");
    let parent = Path::new(path).parent().expect("a parent");
    disk.sync_dir(parent).expect("sync dir");
}

fn contents(disk: &SimDisk, path: &str) -> Option<Vec<u8>> {
    disk.snapshot().remove(path)
}

#[test]
fn unsynced_write_is_lost_after_crash_and_synced_write_survives() {
    let disk = disk_with_db(FaultConfig::none());
    durable_file(&disk, "/db/a", b"synced");
    let file = disk
        .open(Path::new("/db/a"), OpenMode::Existing)
        .expect("open");
    file.write_at(6, b"+unsynced").expect("write");
    assert_eq!(contents(&disk, "/db/a").expect("file"), b"synced+unsynced");
    disk.crash(&mut Rng::new(1));
    assert_eq!(contents(&disk, "/db/a").expect("file"), b"synced");
}

#[test]
fn unsynced_size_change_is_lost_after_crash() {
    let disk = disk_with_db(FaultConfig::none());
    durable_file(&disk, "/db/a", b"0123456789");
    let file = disk
        .open(Path::new("/db/a"), OpenMode::Existing)
        .expect("open");
    file.set_len(3).expect("truncate");
    assert_eq!(file.len().expect("len"), 3);
    disk.crash(&mut Rng::new(1));
    assert_eq!(contents(&disk, "/db/a").expect("file"), b"0123456789");
}

#[test]
fn created_file_vanishes_after_crash_unless_its_directory_was_synced() {
    let disk = disk_with_db(FaultConfig::none());
    for name in ["/db/synced", "/db/unsynced"] {
        let file = disk
            .open(Path::new(name), OpenMode::CreateNew)
            .expect("create");
        file.write_at(0, b"data").expect("write");
        file.sync_data().expect("sync data");
        if name == "/db/synced" {
            disk.sync_dir(Path::new("/db")).expect("sync dir");
        }
    }
    disk.crash(&mut Rng::new(1));
    assert_eq!(disk.list_dir(Path::new("/db")).expect("list"), ["synced"]);
    assert_eq!(contents(&disk, "/db/synced").expect("file"), b"data");
}

#[test]
fn directory_created_without_parent_sync_vanishes_with_its_files() {
    let disk = disk(FaultConfig::none());
    disk.create_dir_all(Path::new("/a/b")).expect("mkdir");
    disk.sync_dir(Path::new("/a")).expect("sync a (but not /)");
    durable_file(&disk, "/a/b/f", b"x");
    disk.crash(&mut Rng::new(1));
    assert!(!disk.exists(Path::new("/a")).expect("exists"));
    assert!(disk.snapshot().is_empty());
}

#[test]
fn rename_is_durable_only_after_directory_sync_and_keeps_content() {
    let disk = disk_with_db(FaultConfig::none());
    durable_file(&disk, "/db/tmp", b"new");
    durable_file(&disk, "/db/current", b"old");
    disk.rename(Path::new("/db/tmp"), Path::new("/db/current"))
        .expect("rename");
    assert_eq!(disk.list_dir(Path::new("/db")).expect("list"), ["current"]);
    disk.crash(&mut Rng::new(1));
    // The unsynced rename is undone: both names, old contents.
    assert_eq!(contents(&disk, "/db/current").expect("file"), b"old");
    assert_eq!(contents(&disk, "/db/tmp").expect("file"), b"new");

    disk.rename(Path::new("/db/tmp"), Path::new("/db/current"))
        .expect("rename");
    disk.sync_dir(Path::new("/db")).expect("sync dir");
    disk.crash(&mut Rng::new(2));
    assert_eq!(disk.list_dir(Path::new("/db")).expect("list"), ["current"]);
    assert_eq!(contents(&disk, "/db/current").expect("file"), b"new");
}

#[test]
fn unsynced_remove_comes_back_after_crash() {
    let disk = disk_with_db(FaultConfig::none());
    durable_file(&disk, "/db/a", b"kept");
    disk.remove_file(Path::new("/db/a")).expect("remove");
    assert!(!disk.exists(Path::new("/db/a")).expect("exists"));
    disk.crash(&mut Rng::new(1));
    assert_eq!(contents(&disk, "/db/a").expect("file"), b"kept");
    disk.remove_file(Path::new("/db/a")).expect("remove");
    disk.sync_dir(Path::new("/db")).expect("sync");
    disk.crash(&mut Rng::new(1));
    assert!(!disk.exists(Path::new("/db/a")).expect("exists"));
}

#[test]
fn a_flushed_directory_keeps_its_unsynced_entries() {
    let faults = FaultConfig {
        crash_dir_flushed_ppm: PPM_ONE,
        ..FaultConfig::none()
    };
    let disk = disk_with_db(faults);
    disk.open(Path::new("/db/a"), OpenMode::CreateNew)
        .expect("create");
    disk.crash(&mut Rng::new(1));
    assert_eq!(contents(&disk, "/db/a").expect("file"), b"");
}

#[test]
fn removed_file_stays_usable_through_open_handle_and_is_freed_on_close() {
    let disk = disk_with_db(FaultConfig::none());
    durable_file(&disk, "/db/a", &[7; 100]);
    let file = disk
        .open(Path::new("/db/a"), OpenMode::Existing)
        .expect("open");
    disk.remove_file(Path::new("/db/a")).expect("remove");
    let mut buf = [0; 100];
    file.read_at(0, &mut buf).expect("read");
    assert_eq!(buf, [7; 100]);
    assert_eq!(disk.used_bytes(), 100);
    disk.sync_dir(Path::new("/db")).expect("sync");
    drop(file);
    assert_eq!(disk.used_bytes(), 0);
}

#[test]
fn reads_past_the_end_fail_with_unexpected_eof() {
    let disk = disk_with_db(FaultConfig::none());
    durable_file(&disk, "/db/a", b"abc");
    let file = disk
        .open(Path::new("/db/a"), OpenMode::Existing)
        .expect("open");
    let mut buf = [0; 4];
    let error = file.read_at(0, &mut buf).expect_err("short file");
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
}

#[test]
fn open_modes_follow_the_trait() {
    let disk = disk_with_db(FaultConfig::none());
    let missing = disk.open(Path::new("/db/a"), OpenMode::Existing);
    assert_eq!(
        missing.expect_err("missing").kind(),
        io::ErrorKind::NotFound
    );
    disk.open(Path::new("/db/a"), OpenMode::OpenOrCreate)
        .expect("create");
    let twice = disk.open(Path::new("/db/a"), OpenMode::CreateNew);
    assert_eq!(
        twice.expect_err("exists").kind(),
        io::ErrorKind::AlreadyExists
    );
    let no_dir = disk.open(Path::new("/nope/a"), OpenMode::OpenOrCreate);
    assert_eq!(no_dir.expect_err("no dir").kind(), io::ErrorKind::NotFound);
}

#[test]
fn fsync_eio_drops_dirty_pages_reports_once_then_syncs_clean() {
    let faults = FaultConfig {
        sync_eio_ppm: PPM_ONE,
        ..FaultConfig::none()
    };
    let disk = disk_with_db(FaultConfig::none());
    durable_file(&disk, "/db/a", &[0; 64]);
    disk.set_faults(faults);
    let file = disk
        .open(Path::new("/db/a"), OpenMode::Existing)
        .expect("open");
    for index in 0..64u8 {
        file.write_at(u64::from(index), &[index + 1])
            .expect("write");
    }
    let error = file.sync_data().expect_err("EIO");
    assert!(error.to_string().contains("EIO"), "{error}");
    let mut after = [0; 64];
    file.read_at(0, &mut after).expect("read");
    let dropped = after.iter().filter(|&&b| b == 0).count();
    assert!(
        dropped > 0 && dropped < 64,
        "some pages dropped, some written: {dropped}"
    );
    // Nothing is dirty any more: the error is not reported again, and the
    // dropped pages were never written.
    file.sync_data().expect("later sync succeeds");
    disk.crash(&mut Rng::new(1));
    assert_eq!(contents(&disk, "/db/a").expect("file"), after);
}

#[test]
fn capacity_enospc_writes_what_fits_then_fails() {
    let faults = FaultConfig {
        capacity_bytes: Some(10),
        ..FaultConfig::none()
    };
    let disk = disk_with_db(faults);
    let file = disk
        .open(Path::new("/db/a"), OpenMode::CreateNew)
        .expect("create");
    file.write_at(0, b"0123456").expect("fits");
    let error = file.write_at(7, b"789abc").expect_err("full");
    assert_eq!(error.kind(), io::ErrorKind::StorageFull);
    assert_eq!(file.len().expect("len"), 10);
    assert_eq!(
        file.set_len(11).expect_err("full").kind(),
        io::ErrorKind::StorageFull
    );
    file.write_at(0, b"overwrite")
        .expect("overwriting needs no space");
}

#[test]
fn short_writes_write_a_strict_prefix_then_fail() {
    let faults = FaultConfig {
        write_short_ppm: PPM_ONE,
        ..FaultConfig::none()
    };
    let disk = disk_with_db(faults);
    let file = disk
        .open(Path::new("/db/a"), OpenMode::CreateNew)
        .expect("create");
    for _ in 0..8 {
        let before = file.len().expect("len");
        file.write_at(before, &[1; 100]).expect_err("short");
        assert!(file.len().expect("len") < before + 100);
    }
    assert!(
        file.len().expect("len") > 0,
        "some prefix landed in 8 tries"
    );
}

#[test]
fn transient_enospc_writes_nothing() {
    let faults = FaultConfig {
        enospc_ppm: PPM_ONE,
        ..FaultConfig::none()
    };
    let disk = disk_with_db(faults);
    let file = disk
        .open(Path::new("/db/a"), OpenMode::CreateNew)
        .expect("create");
    assert_eq!(
        file.write_at(0, b"x").expect_err("full").kind(),
        io::ErrorKind::StorageFull
    );
    assert_eq!(file.len().expect("len"), 0);
}

#[test]
fn every_call_is_counted() {
    let disk = disk(FaultConfig::none());
    let root = Path::new("/");
    let path = Path::new("/f");
    disk.create_dir_all(Path::new("/d")).expect("1");
    let file = disk.open(path, OpenMode::CreateNew).expect("2");
    file.write_at(0, b"x").expect("3");
    file.read_at(0, &mut [0]).expect("4");
    file.len().expect("5");
    file.set_len(1).expect("6");
    file.sync_data().expect("7");
    disk.list_dir(root).expect("8");
    disk.rename(path, Path::new("/g")).expect("9");
    disk.exists(path).expect("10");
    disk.sync_dir(root).expect("11");
    let lock = disk.lock_dir(root).expect("12");
    disk.remove_file(Path::new("/g")).expect("13");
    drop(lock);
    assert_eq!(disk.ops_count(), 13);
}

#[test]
fn crash_after_ops_fails_the_nth_call_and_every_later_one_until_reboot() {
    let disk = disk_with_db(FaultConfig::none());
    let file = disk
        .open(Path::new("/db/a"), OpenMode::CreateNew)
        .expect("create");
    disk.set_crash_after_ops(3);
    file.write_at(0, b"1").expect("first call runs");
    file.write_at(1, b"2").expect("second call runs");
    let error = file.sync_data().expect_err("third call loses power");
    assert_eq!(error.kind(), io::ErrorKind::Other);
    assert_eq!(error.to_string(), POWER_LOSS_MESSAGE);
    assert!(disk.is_powered_off());
    let later = disk.list_dir(Path::new("/db")).expect_err("still dark");
    assert_eq!(later.to_string(), POWER_LOSS_MESSAGE);
    disk.crash(&mut Rng::new(1));
    assert!(!disk.is_powered_off());
    disk.list_dir(Path::new("/db")).expect("power is back");
}

#[test]
fn handles_from_before_a_crash_are_dead() {
    let disk = disk_with_db(FaultConfig::none());
    durable_file(&disk, "/db/a", b"x");
    let file = disk
        .open(Path::new("/db/a"), OpenMode::Existing)
        .expect("open");
    disk.crash(&mut Rng::new(1));
    file.len().expect_err("stale handle");
    file.read_at(0, &mut [0]).expect_err("stale handle");
    let fresh = disk
        .open(Path::new("/db/a"), OpenMode::Existing)
        .expect("reopen");
    assert_eq!(fresh.len().expect("len"), 1);
}

#[test]
fn lock_dir_is_exclusive_until_dropped_and_a_crash_releases_it() {
    let disk = disk_with_db(FaultConfig::none());
    let db = Path::new("/db");
    let first = disk.lock_dir(db).expect("lock");
    assert_eq!(
        disk.lock_dir(db).expect_err("held").kind(),
        io::ErrorKind::WouldBlock
    );
    assert_eq!(disk.list_dir(db).expect("list"), [LOCK_FILE_NAME]);
    drop(first);
    let second = disk.lock_dir(db).expect("relock");
    disk.crash(&mut Rng::new(1));
    let third = disk.lock_dir(db).expect("a crash releases locks");
    // The pre-crash guard must not release the post-crash lock.
    drop(second);
    assert_eq!(
        disk.lock_dir(db).expect_err("held").kind(),
        io::ErrorKind::WouldBlock
    );
    drop(third);
}

#[test]
fn rot_flips_one_synced_bit_and_lists_it() {
    let disk = disk_with_db(FaultConfig::none());
    durable_file(&disk, "/db/a", &[0; 32]);
    let unsynced = disk
        .open(Path::new("/db/b"), OpenMode::CreateNew)
        .expect("create");
    unsynced.write_at(0, b"pending").expect("write");
    assert_eq!(
        disk.rot(Path::new("/db/b"), &mut Rng::new(1)).expect("rot"),
        None
    );
    let record = disk
        .rot(Path::new("/db/a"), &mut Rng::new(1))
        .expect("rot")
        .expect("synced bytes");
    let image = contents(&disk, "/db/a").expect("file");
    let flipped: Vec<usize> = (0..32).filter(|&i| image[i] != 0).collect();
    assert_eq!(flipped, [record.offset_bytes as usize]);
    assert_eq!(image[flipped[0]], 1 << record.bit);
    assert_eq!(disk.rotted(), std::slice::from_ref(&record));
    assert_eq!(record.path, Path::new("/db/a"));
    disk.crash(&mut Rng::new(2));
    assert_eq!(
        contents(&disk, "/db/a").expect("file"),
        image,
        "rot is durable"
    );
}

/// A little workload: files created, written, synced (or not), renamed and
/// removed, chosen by `rng`; errors are expected and ignored.
fn workload(disk: &SimDisk, rng: &mut Rng, steps: u32) {
    let names = ["/d/a", "/d/b", "/d/c"];
    let _ = disk.create_dir_all(Path::new("/d"));
    let _ = disk.sync_dir(Path::new("/"));
    for _ in 0..steps {
        let name = Path::new(*rng.pick(&names));
        match rng.below(6) {
            0 | 1 => {
                if let Ok(file) = disk.open(name, OpenMode::OpenOrCreate) {
                    let mut data = vec![0; usize::try_from(rng.below(2_000)).expect("small")];
                    rng.fill(&mut data);
                    let _ = file.write_at(rng.below(3_000), &data);
                    if rng.chance_ppm(PPM_ONE / 2) {
                        let _ = file.sync_data();
                    }
                }
            }
            2 => {
                let _ = disk.rename(name, Path::new(*rng.pick(&names)));
            }
            3 => {
                let _ = disk.remove_file(name);
            }
            4 => {
                let _ = disk.sync_dir(Path::new("/d"));
            }
            _ => {
                if let Ok(file) = disk.open(name, OpenMode::OpenOrCreate) {
                    let _ = file.set_len(rng.below(4_000));
                }
            }
        }
    }
}

fn run_seed(seed: u64) -> (u64, std::collections::BTreeMap<String, Vec<u8>>) {
    let mut root = Rng::new(seed);
    let faults = FaultConfig::swarm(&mut root.fork("faults"));
    let disk = SimDisk::new(root.fork("disk"), faults);
    let mut work = root.fork("workload");
    let mut crash = root.fork("crash");
    workload(&disk, &mut work, 200);
    disk.set_crash_after_ops(1 + work.below(50));
    workload(&disk, &mut work, 100);
    disk.crash(&mut crash);
    let _ = disk.rot(Path::new("/d/a"), &mut crash);
    workload(&disk, &mut work, 50);
    disk.crash(&mut crash);
    (disk.trace_hash(), disk.snapshot())
}

#[test]
fn the_same_seed_gives_the_same_trace_and_post_crash_images() {
    for seed in 0..16 {
        let first = run_seed(seed);
        assert_eq!(first, run_seed(seed), "seed {seed} did not replay");
        assert_ne!(
            first.0,
            run_seed(seed + 1000).0,
            "seed {seed}: trace ignores the seed"
        );
    }
}

#[test]
fn crash_is_deterministic_in_its_rng() {
    let build = || {
        let disk = disk_with_db(FaultConfig::crash_only());
        let file = disk
            .open(Path::new("/db/a"), OpenMode::CreateNew)
            .expect("create");
        for index in 0..32u64 {
            file.write_at(index * 300, &[u8::try_from(index).expect("small"); 700])
                .expect("write");
        }
        disk
    };
    let (a, b) = (build(), build());
    a.crash(&mut Rng::new(5));
    b.crash(&mut Rng::new(5));
    assert_eq!(a.snapshot(), b.snapshot());
    assert_eq!(a.trace_hash(), b.trace_hash());
}

const TABLE: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("t");

fn open_redb(disk: &SimDisk) -> redb::Database {
    try_open_redb(disk).expect("redb opens")
}

fn try_open_redb(disk: &SimDisk) -> Result<redb::Database, redb::DatabaseError> {
    let file = disk
        .open(Path::new("/db/state.redb"), OpenMode::OpenOrCreate)
        .expect("open redb file");
    redb::Database::builder().create_with_backend(RedbBackend::new(file))
}

fn insert(db: &redb::Database, key: u64, durability: redb::Durability) {
    let mut txn = db.begin_write().expect("begin");
    txn.set_durability(durability).expect("durability");
    txn.open_table(TABLE)
        .expect("table")
        .insert(key, format!("value {key}").as_bytes())
        .expect("insert");
    txn.commit().expect("commit");
}

fn try_insert(db: &redb::Database, key: u64) -> Result<(), redb::Error> {
    let txn = db.begin_write()?;
    txn.open_table(TABLE)?
        .insert(key, format!("value {key}").as_bytes())?;
    txn.commit()?;
    Ok(())
}

fn assert_keys(
    disk: &SimDisk,
    durable_keys: std::ops::Range<u64>,
    maybe_key: Option<u64>,
    context: &str,
) {
    use redb::ReadableDatabase;
    let db = try_open_redb(disk)
        .unwrap_or_else(|error| panic!("{context}: redb does not open: {error}"));
    let txn = db.begin_read().expect("read");
    let table = txn.open_table(TABLE).expect("table");
    for key in durable_keys {
        let value = table
            .get(key)
            .expect("get")
            .unwrap_or_else(|| panic!("{context}: key {key} lost"));
        assert_eq!(
            value.value(),
            format!("value {key}").as_bytes(),
            "{context}"
        );
    }
    if let Some(key) = maybe_key
        && let Some(value) = table.get(key).expect("get")
    {
        assert_eq!(
            value.value(),
            format!("value {key}").as_bytes(),
            "{context}"
        );
    }
}

#[test]
fn redb_immediate_commits_survive_a_crash_on_the_sim_disk() {
    for seed in 0..8 {
        let disk = disk_with_db(FaultConfig::crash_only());
        {
            let db = open_redb(&disk);
            disk.sync_dir(Path::new("/db"))
                .expect("make the file's entry durable");
            for key in 0..4 {
                insert(&db, key, redb::Durability::Immediate);
            }
            // redb keeps `Durability::None` commits in memory: they do no
            // I/O at all, so the crash below has nothing of theirs to tear.
            let ops_before = disk.ops_count();
            insert(&db, 100, redb::Durability::None);
            assert_eq!(disk.ops_count(), ops_before);
            // Crash with the database still open; its drop then fails on
            // dead handles, as a real process would never get to run it.
            disk.crash(&mut Rng::new(seed));
        }
        assert_keys(&disk, 0..4, None, &format!("seed {seed}"));
    }
}

/// Crash faults with sector-atomic tears: every torn sector holds the old or
/// the new bytes, never garbage (see the next test for why).
fn sector_atomic_crashes() -> FaultConfig {
    FaultConfig {
        torn_sector_garbage_ppm: 0,
        ..FaultConfig::crash_only()
    }
}

/// A redb file with three durable commits, and the I/O call count of a
/// fourth, measured on a twin disk.
fn redb_with_three_commits(faults: FaultConfig) -> (SimDisk, redb::Database) {
    let disk = disk_with_db(faults);
    let db = open_redb(&disk);
    disk.sync_dir(Path::new("/db")).expect("sync dir");
    for key in 0..3 {
        insert(&db, key, redb::Durability::Immediate);
    }
    (disk, db)
}

/// Power lost at each I/O call of a durable commit, each crash tearing
/// what was unsynced in several ways: earlier commits must survive, and the
/// interrupted one is all or nothing.
#[test]
fn redb_survives_power_loss_at_every_io_call_of_a_commit() {
    const CRASH_SEEDS_PER_CALL: u64 = 16;
    let (disk, db) = redb_with_three_commits(sector_atomic_crashes());
    let start = disk.ops_count();
    insert(&db, 3, redb::Durability::Immediate);
    let commit_ops = disk.ops_count() - start;
    assert!(commit_ops > 2, "a durable commit writes and syncs");
    let mut torn_something = false;
    for crash_at in 1..=commit_ops {
        for crash_seed in 0..CRASH_SEEDS_PER_CALL {
            let (disk, db) = redb_with_three_commits(sector_atomic_crashes());
            disk.set_crash_after_ops(crash_at);
            let committed = try_insert(&db, 3).is_ok();
            assert!(
                !committed,
                "commit returned Ok after power loss at op {crash_at}"
            );
            let before = disk.snapshot();
            disk.crash(&mut Rng::new(crash_at * 1_000 + crash_seed));
            torn_something |= before != disk.snapshot();
            drop(db);
            let context =
                format!("power lost at op {crash_at} of {commit_ops}, crash seed {crash_seed}");
            assert_keys(&disk, 0..3, Some(3), &context);
        }
    }
    assert!(
        torn_something,
        "no crash found unsynced redb writes to tear"
    );
}

/// A known limit, pinned so it cannot change unnoticed: redb (1.x to 4.x,
/// default one-phase commit) rewrites its 320-byte header, magic number
/// included, at offset 0 as the *first* write of every commit. If power is
/// lost before the commit's sync and that sector comes back as garbage, the
/// file no longer opens at all: the error is detected (never wrong data),
/// but every earlier durable commit is unreachable.
#[test]
fn redb_refuses_to_open_after_garbage_in_its_header_sector() {
    let garbage = FaultConfig {
        crash_write_lost_ppm: 0,
        crash_write_torn_ppm: PPM_ONE,
        torn_sector_garbage_ppm: PPM_ONE,
        ..FaultConfig::crash_only()
    };
    let (disk, db) = redb_with_three_commits(garbage);
    disk.set_crash_after_ops(2); // The header write lands in the page cache.
    try_insert(&db, 3).expect_err("power lost mid-commit");
    disk.crash(&mut Rng::new(0));
    drop(db);
    let error = try_open_redb(&disk).expect_err("a garbage header must not open");
    assert!(error.to_string().contains("magic number"), "{error}");
}

#[test]
fn a_quiet_reader_meets_no_fault_and_leaves_the_schedule_as_it_was() {
    let disk = disk_with_db(FaultConfig::none());
    durable_file(&disk, "/db/a", b"acknowledged");
    disk.set_faults(FaultConfig {
        sync_eio_ppm: PPM_ONE,
        ..FaultConfig::none()
    });
    disk.set_crash_after_ops(5);
    let (ops, trace) = (disk.ops_count(), disk.trace_hash());
    let read = disk.quietly(|| {
        let file = disk.open(Path::new("/db/a"), OpenMode::Existing)?;
        let mut bytes = vec![0; 12];
        file.read_at(0, &mut bytes)?;
        file.sync_data()?;
        file.sync_data()?;
        file.sync_data()?;
        Ok::<_, io::Error>(bytes)
    });
    assert_eq!(read.expect("no fault, no cut"), b"acknowledged");
    assert_eq!((disk.ops_count(), disk.trace_hash()), (ops, trace));
    // The schedule's own calls meet its faults and its cut as before: the
    // fifth call from the arming cuts the power.
    let file = disk
        .open(Path::new("/db/a"), OpenMode::Existing)
        .expect("open");
    file.write_at(12, b"!").expect("write");
    assert!(file.sync_data().is_err(), "every sync of dirty data fails");
    assert!(!disk.is_powered_off());
    let _ = file.sync_data();
    assert!(!disk.is_powered_off());
    let _ = file.sync_data();
    assert!(
        disk.is_powered_off(),
        "the cut armed before is where it was"
    );
}
