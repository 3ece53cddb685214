//! Every read command of `actum` on copies of a known database damaged the
//! way a bad disk does (a run of garbage written into one file at a random
//! offset, the state store most often), one closed cleanly and one left
//! as a crash leaves it. Each command exits 0 (done), 1 (`verify` found
//! damage) or 2 (could not run, saying why on stderr): never 101, the exit
//! of a panic. Damage inside the state store makes redb itself panic on
//! some copies (it trusts a page whose checksum nobody asked for); the
//! test counts those answers, so it fails if none of its copies reaches
//! the engine's guard.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use support::*;

/// Damaged copies tried per image. Copies that make redb panic are rare
/// (2 of 1,200 since blobs became a stream, schema 13: trials 235 and 593
/// of the closed image), so the count reaches the first.
const TRIALS: u64 = 240;
/// The longest run of garbage one trial writes.
const GARBAGE_BYTES_MAX: u64 = 512;

/// The read commands, with `{}` for the directory.
const COMMANDS: [&[&str]; 6] = [
    &["inspect", "{}"],
    &["inspect", "{}", "--json"],
    &["verify", "{}"],
    &["export", "{}", "--all"],
    &["export", "{}", "--run", runs::DONE],
    &["stuck", "{}", "--older-than", "1m"],
];

/// A repeatable stream of numbers (xorshift), one per trial.
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The files a trial may damage: the state store three times in four.
fn pick(db: &Path, noise: &mut Noise) -> PathBuf {
    let others = [db.join("MANIFEST-0"), db.join("MANIFEST-1"), segment(db, 1)];
    match noise.next() % 12 {
        k @ 0..=2 => others[usize::try_from(k).unwrap()].clone(),
        _ => db.join("state.redb"),
    }
}

/// What the commands answered over every trial of one image.
#[derive(Debug, Default)]
struct Tally {
    /// Answers by exit code, over every command.
    by_code: [u64; 3],
    /// Answers that carried a redb panic the engine caught.
    redb_panics_caught: u64,
    /// Copies `verify` found damaged.
    verify_found: u64,
    /// ... of which every other read command answered without an error:
    /// damage an open works around (the older manifest copy, a part of the
    /// log or of the state store that nothing live reaches).
    worked_around: u64,
}

fn trials(name: &str, pristine: &Path, tally: &mut Tally) {
    let copy = copy_db(pristine);
    let db = copy.path();
    for trial in 0..TRIALS {
        let mut noise = Noise(0x9e37_79b9_7f4a_7c15 ^ (trial + 1));
        let file = pick(db, &mut noise);
        let len = std::fs::metadata(&file).unwrap().len();
        let at = noise.next() % len;
        let run = (16 + noise.next() % GARBAGE_BYTES_MAX).min(len - at);
        let garbage: Vec<u8> = (0..run).map(|_| noise.next().to_le_bytes()[3]).collect();
        let handle = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&file)
            .unwrap();
        let mut original = vec![0u8; garbage.len()];
        handle.read_exact_at(&mut original, at).unwrap();
        handle.write_all_at(&garbage, at).unwrap();
        let mut others_clean = true;
        let mut verify_exit = 0;
        for command in COMMANDS {
            let out = actum_on(db, command);
            let exit = code(&out);
            let err = stderr(&out);
            assert!(
                (0..=2).contains(&exit),
                "{name} copy, trial {trial}: `actum {}` exited {exit} with {run} bytes of garbage \
                 at offset {at} of {}:\n{err}",
                command.join(" "),
                file.display()
            );
            tally.by_code[usize::try_from(exit).unwrap()] += 1;
            if exit == 2 {
                assert!(
                    err.contains(db.to_str().unwrap()),
                    "names the directory: {err}"
                );
            }
            if err.contains("redb panicked") || stdout(&out).contains("redb panicked") {
                tally.redb_panics_caught += 1;
            }
            if command[0] == "verify" {
                verify_exit = exit;
            } else {
                others_clean &= exit == 0;
            }
        }
        tally.verify_found += u64::from(verify_exit == 1);
        tally.worked_around += u64::from(verify_exit == 1 && others_clean);
        // Read commands write nothing, so putting the bytes back restores
        // the copy for the next trial.
        handle.write_all_at(&original, at).unwrap();
    }
}

#[test]
fn read_commands_exit_0_1_or_2_on_every_damaged_copy_never_101() {
    let closed = known_db();
    let crashed = tempfile::tempdir().unwrap();
    drop(build_known(crashed.path()));
    let mut tally = Tally::default();
    trials("closed", closed.path(), &mut tally);
    trials("crashed", crashed.path(), &mut tally);
    eprintln!("{tally:?}");
    assert!(tally.by_code[0] > 0, "most copies still read: {tally:?}");
    assert!(
        tally.by_code[1] > 0 && tally.by_code[2] > 0,
        "damage was found and refused: {tally:?}"
    );
    assert!(
        tally.redb_panics_caught > 0,
        "no copy made redb panic, so the guard was never reached: {tally:?}"
    );
}
