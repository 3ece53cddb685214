//! Scaffolding shared by the runnable examples in this directory: the
//! command line (`--quick`, `--dir PATH`), where the database lives, a
//! seeded generator, the invariant checks that decide the exit code, and a
//! disk that dies with its process ([`MortalDisk`]).
//!
//! Nothing here calls the engine: each example shows the engine's API on its
//! own, and uses this crate only so that its file is about the agent, not
//! about argument parsing. The one engine type touched is the `Storage`
//! trait, which [`MortalDisk`] implements so that an example can kill its
//! process at an exact instant (between an act and its record, say).

use std::error::Error;
use std::fmt::Debug;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use actum::storage::{DirLock, FsStorage, OpenMode, Storage, StorageFile};

/// What every example's `main` returns on a failure it did not check for
/// (an engine error, an I/O error): printed, and the exit code is 1.
pub type BoxError = Box<dyn Error>;

/// The command line every example accepts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cli {
    /// `--quick`: fewer runs, so CI runs the example in a few seconds.
    pub quick: bool,
    /// `--dir PATH`: keep the database in `PATH` (new or empty) rather
    /// than in a temporary directory removed at exit.
    pub dir: Option<PathBuf>,
}

impl Cli {
    /// Parses `args` (without the program name); `Err` carries the usage
    /// text to print, after the reason.
    pub fn parse(name: &str, args: impl IntoIterator<Item = String>) -> Result<Cli, String> {
        let usage = format!(
            "usage: cargo run --example {name} -- [--quick] [--dir PATH]\n  \
             --quick     fewer runs, for CI\n  \
             --dir PATH  keep the database in PATH (a new or empty directory)"
        );
        let mut cli = Cli::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--quick" => cli.quick = true,
                "--dir" => {
                    let path = args
                        .next()
                        .ok_or_else(|| format!("--dir needs a path\n{usage}"))?;
                    cli.dir = Some(PathBuf::from(path));
                }
                "-h" | "--help" => return Err(usage),
                other => return Err(format!("unknown argument {other:?}\n{usage}")),
            }
        }
        Ok(cli)
    }
}

/// The directory the example's database lives in: a temporary one, or the
/// one `--dir` named.
#[derive(Debug)]
pub struct Workdir {
    /// Kept so the temporary directory lives as long as the example.
    _temp: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl Workdir {
    /// A temporary directory, or `dir` (created if absent). A `dir` that
    /// holds anything is refused: the examples create their runs from
    /// scratch and check what they did, which a database left by an
    /// earlier run would blur.
    pub fn new(dir: Option<&Path>) -> Result<Workdir, BoxError> {
        let Some(dir) = dir else {
            let temp = tempfile::tempdir()?;
            let path = temp.path().to_path_buf();
            return Ok(Workdir {
                _temp: Some(temp),
                path,
            });
        };
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create --dir {}: {e}", dir.display()))?;
        if std::fs::read_dir(dir)?.next().is_some() {
            return Err(format!(
                "--dir {} is not empty: pass a new or empty directory (the example starts \
                 from an empty database)",
                dir.display()
            )
            .into());
        }
        Ok(Workdir {
            _temp: None,
            path: dir.to_path_buf(),
        })
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The invariants an example checks at its end. Each check is printed; a
/// failed one makes the example exit non-zero, which is what CI relies on.
#[derive(Debug, Default)]
pub struct Checks {
    held: usize,
    failed: Vec<String>,
}

impl Checks {
    /// Records that `what` held if `held`, else that it failed, with
    /// `detail` saying what was found.
    pub fn check(&mut self, what: &str, held: bool, detail: impl FnOnce() -> String) {
        if held {
            self.held += 1;
            println!("  ok    {what}");
        } else {
            let failure = format!("{what}: {}", detail());
            println!("  FAIL  {failure}");
            self.failed.push(failure);
        }
    }

    /// Records that `what` held if nothing broke it, else that it failed,
    /// naming every case in `broken`.
    pub fn none_of(&mut self, what: &str, broken: &[String]) {
        self.check(what, broken.is_empty(), || broken.join(", "));
    }

    /// Records whether `found` equals `expected`.
    pub fn equal<T: PartialEq + Debug>(&mut self, what: &str, found: T, expected: T) {
        let held = found == expected;
        self.check(what, held, || {
            format!("found {found:?}, expected {expected:?}")
        });
    }

    /// The exit code: success only if every check held.
    pub fn finish(self, name: &str) -> ExitCode {
        if self.failed.is_empty() {
            println!("{name}: all {} invariants held", self.held);
            return ExitCode::SUCCESS;
        }
        eprintln!(
            "{name}: {} of {} invariants FAILED:",
            self.failed.len(),
            self.held + self.failed.len()
        );
        for failure in &self.failed {
            eprintln!("  {failure}");
        }
        ExitCode::FAILURE
    }
}

/// `12345` cents as `123.45`.
pub fn euros(cents: u64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

/// Runs an example: parses the command line, makes its directory, runs
/// `body`, and turns its checks (or its error) into the exit code.
pub fn main_of(
    name: &str,
    body: impl FnOnce(&Cli, &Path, &mut Checks) -> Result<(), BoxError>,
) -> ExitCode {
    let cli = match Cli::parse(name, std::env::args().skip(1)) {
        Ok(cli) => cli,
        Err(usage) => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    let mut checks = Checks::default();
    let outcome = Workdir::new(cli.dir.as_deref()).and_then(|workdir| {
        println!("{name}: database in {}", workdir.path().display());
        body(&cli, workdir.path(), &mut checks)
    });
    match outcome {
        Ok(()) => checks.finish(name),
        Err(e) => {
            eprintln!("{name}: stopped by an error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A tiny seeded generator (xorshift64*), so that an example's variety is
/// the same on every run.
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator from `seed` (zero is replaced: xorshift never leaves it).
    pub fn new(seed: u64) -> XorShift {
        XorShift(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0) has no value to return");
        self.next_u64() % n
    }
}

/// The disk of one process of an example's service: the real file system,
/// until [`kill`](MortalDisk::kill). From then on every write, resize, sync,
/// creation, rename and removal fails, as if the process had been killed at
/// that instant: nothing the engine writes afterwards lands, its next commit
/// fails and it halts, and whatever the process was doing stops there.
///
/// This is how an example crashes in the middle of a handler. The runtime
/// runs the handler inside the engine's calls, so the engine cannot simply
/// be dropped there; a killed disk leaves the database exactly as a killed
/// process would (the dead worker's lease still in the books, an act's
/// intent without its outcome), and the next process opens it on a new
/// disk. Reads still work, so the dead engine can be dropped quietly.
#[derive(Clone, Debug, Default)]
pub struct MortalDisk {
    dead: Arc<AtomicBool>,
}

impl MortalDisk {
    /// A live disk for a new process.
    pub fn new() -> MortalDisk {
        MortalDisk::default()
    }

    /// Kills the process: no write of it lands from now on.
    pub fn kill(&self) {
        self.dead.store(true, Ordering::Release);
    }

    /// True once [`kill`](MortalDisk::kill) was called.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    fn alive(&self) -> io::Result<()> {
        if self.is_dead() {
            return Err(io::Error::other("the process was killed"));
        }
        Ok(())
    }
}

/// A file on a [`MortalDisk`].
#[derive(Debug)]
struct MortalFile {
    disk: MortalDisk,
    file: Box<dyn StorageFile>,
}

impl StorageFile for MortalFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.disk.alive()?;
        self.file.write_at(offset, data)
    }

    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.disk.alive()?;
        self.file.set_len(len_bytes)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.disk.alive()?;
        self.file.sync_data()
    }
}

impl Storage for MortalDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        if mode != OpenMode::Existing {
            self.alive()?;
        }
        let file = FsStorage::new().open(path, mode)?;
        Ok(Box::new(MortalFile {
            disk: self.clone(),
            file,
        }))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.alive()?;
        FsStorage::new().create_dir_all(dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        FsStorage::new().list_dir(dir)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        FsStorage::new().exists(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.alive()?;
        FsStorage::new().rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.alive()?;
        FsStorage::new().remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.alive()?;
        FsStorage::new().sync_dir(dir)
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        self.alive()?;
        FsStorage::new().lock_dir(dir)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, String> {
        Cli::parse("x", args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn the_command_line_takes_quick_and_a_dir_and_refuses_the_rest() {
        assert_eq!(parse(&[]).unwrap(), Cli::default());
        let cli = parse(&["--dir", "/tmp/db", "--quick"]).unwrap();
        assert_eq!((cli.quick, cli.dir), (true, Some(PathBuf::from("/tmp/db"))));
        assert!(parse(&["--dir"]).unwrap_err().contains("needs a path"));
        assert!(parse(&["--fast"]).unwrap_err().contains("unknown argument"));
    }

    #[test]
    fn a_dir_that_holds_something_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Workdir::new(Some(dir.path())).is_ok(), "empty is fine");
        std::fs::write(dir.path().join("wal"), b"x").unwrap();
        let refused = Workdir::new(Some(dir.path())).unwrap_err().to_string();
        assert!(refused.contains("not empty"), "{refused}");
    }

    #[test]
    fn a_failed_check_fails_the_exit_code() {
        let mut checks = Checks::default();
        checks.equal("one is one", 1, 1);
        assert_eq!(checks.finish("x"), ExitCode::SUCCESS);
        let mut checks = Checks::default();
        checks.equal("one is two", 1, 2);
        assert_eq!(checks.finish("x"), ExitCode::FAILURE);
    }

    #[test]
    fn a_killed_disk_writes_nothing_more_but_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        let disk = MortalDisk::new();
        let path = dir.path().join("f");
        let file = disk.open(&path, OpenMode::CreateNew).unwrap();
        file.write_at(0, b"before").unwrap();
        file.sync_data().unwrap();
        disk.kill();
        assert!(file.write_at(0, b"after!").is_err());
        assert!(file.sync_data().is_err());
        assert!(
            disk.open(&dir.path().join("g"), OpenMode::CreateNew)
                .is_err()
        );
        let mut read = [0; 6];
        file.read_at(0, &mut read).unwrap();
        assert_eq!(&read, b"before");
        let next = MortalDisk::new();
        assert!(
            next.open(&path, OpenMode::Existing).is_ok(),
            "a new process's disk lives"
        );
    }

    #[test]
    fn the_generator_is_seeded() {
        let (mut a, mut b) = (XorShift::new(7), XorShift::new(7));
        let xs: Vec<u64> = (0..4).map(|_| a.below(100)).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.below(100)).collect();
        assert_eq!(xs, ys);
        assert!(xs.iter().all(|&x| x < 100));
    }
}
