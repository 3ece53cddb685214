//! Opening a database that must already be there: to read it only
//! ([`Engine::open_read_only`]), or to change it
//! ([`Engine::open_existing`]). Either refuses a directory that holds no
//! database ([`Error::NoDatabase`], saying what is there) and creates
//! nothing, where [`Engine::open`] would create one.
//!
//! A read-only open recovers the directory on a [`ReadOnlyStorage`], so a
//! torn tail is cut, the manifest advanced and the log replayed in memory
//! while the files stay byte for byte as they were.
//!
//! **Invariant:** a read-only open writes nothing to the directory: every
//! write lands in the overlay, automatic checkpoints are off, and the only
//! real call with an effect is the directory lock, so an engine that has
//! the directory open is reported (`Locked`) instead of read mid-write.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
use crate::db::{CREATING_MARKER, MANIFEST_FILES};
use crate::error::{Error, Result};
use crate::storage::{FsStorage, ReadOnlyStorage, Storage};

use super::core::{Access, Engine};
use super::options::EngineOptions;

/// How many of a directory's entries a [`Error::NoDatabase`] names.
const ENTRIES_NAMED_MAX: usize = 5;

impl Engine {
    /// Opens the database in `dir` on the real file system to read it:
    /// nothing in `dir` is written, created or removed (see
    /// [`Engine::open_read_only_with`]).
    ///
    /// ```
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let missing = dir.path().join("no-such-db");
    /// let refused = Engine::open_read_only(&missing, EngineOptions::default());
    /// assert!(matches!(refused, Err(actum::Error::NoDatabase { .. })));
    /// assert!(!missing.exists(), "nothing was created");
    /// Engine::open(dir.path(), EngineOptions::default())?.close()?;
    /// let engine = Engine::open_read_only(dir.path(), EngineOptions::default())?;
    /// assert!(engine.runs(None, None, 10)?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_read_only(dir: impl AsRef<Path>, options: EngineOptions) -> Result<Engine> {
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        Engine::open_read_only_with(storage, Arc::new(SystemClock), dir, options)
    }

    /// Opens the database in `dir` on `storage` through a
    /// [`ReadOnlyStorage`], with automatic checkpoints off: recovery runs
    /// as in [`Engine::open_with`], in memory, except that no lease is
    /// released: the books show them as the last process left them.
    /// `NoDatabase` if `dir` is missing, not a directory, or holds no
    /// manifest (or only an interrupted creation); `Locked` if an engine
    /// has it open.
    ///
    /// Reads answer as on any engine. Commands are not refused: they are
    /// decided and logged into the overlay, and are gone when the engine
    /// is dropped; open the directory with [`Engine::open`] to change it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use actum::books::{CreateRun, RunId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::{FsStorage, ManualClock};
    ///
    /// let dir = tempfile::tempdir()?;
    /// Engine::open(dir.path(), EngineOptions::default())?.close()?;
    /// let clock = Arc::new(ManualClock::new(1_000));
    /// let engine = Engine::open_read_only_with(Arc::new(FsStorage::new()), clock, dir.path(),
    ///     EngineOptions::default())?;
    /// // A what-if: the command is decided and read back, in memory only.
    /// let run = RunId::new("what-if")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"?"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// assert_eq!(engine.run(&run)?.expect("in the overlay").created_ms, 1_000);
    /// drop(engine);
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// assert!(engine.run(&run)?.is_none(), "nothing was written");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_read_only_with(
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        dir: impl AsRef<Path>,
        options: EngineOptions,
    ) -> Result<Engine> {
        let dir = dir.as_ref();
        require_database(storage.as_ref(), dir)?;
        let options = read_only_options(options);
        let view: Arc<dyn Storage> = Arc::new(ReadOnlyStorage::new(storage));
        Engine::open_for(view, clock, dir, options, Access::ReadOnly)
    }

    /// Opens the database in `dir` on the real file system, as
    /// [`Engine::open`] does, but only if there is one: `NoDatabase`
    /// (creating nothing) if `dir` is missing or holds no database.
    ///
    /// ```
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::Error;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let refused = Engine::open_existing(dir.path(), EngineOptions::default());
    /// assert!(matches!(refused, Err(Error::NoDatabase { .. })));
    /// assert_eq!(std::fs::read_dir(dir.path())?.count(), 0, "nothing was created");
    /// Engine::open(dir.path(), EngineOptions::default())?.close()?;
    /// let engine = Engine::open_existing(dir.path(), EngineOptions::default())?;
    /// assert!(!engine.recovery().created);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_existing(dir: impl AsRef<Path>, options: EngineOptions) -> Result<Engine> {
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        require_database(storage.as_ref(), dir.as_ref())?;
        Engine::open_with(storage, Arc::new(SystemClock), dir, options)
    }
}

/// `options` for an engine that must write nothing: automatic checkpoints
/// and retention off.
pub(crate) fn read_only_options(options: EngineOptions) -> EngineOptions {
    EngineOptions {
        checkpoint_every_records: 0,
        checkpoint_every_bytes: 0,
        retention: super::Retention::default(),
        ..options
    }
}

/// `Ok` if `dir` holds a database (a manifest copy, and no interrupted
/// creation); otherwise [`Error::NoDatabase`] saying what is there. Reads
/// only.
pub(crate) fn require_database(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let none = |found: String| {
        Err(Error::NoDatabase {
            dir: dir.to_path_buf(),
            found,
        })
    };
    let exists = storage
        .exists(dir)
        .map_err(|e| Error::io("look for database directory", dir, e))?;
    if !exists {
        return none("the directory does not exist".to_string());
    }
    let names = match storage.list_dir(dir) {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
            return none("it is a file, not a directory".to_string());
        }
        Err(e) => return Err(Error::io("list database directory", dir, e)),
    };
    if names.iter().any(|name| name == CREATING_MARKER) {
        return none(format!(
            "its creation was interrupted (the {CREATING_MARKER} marker is there); opening it \
             for writing starts the creation over"
        ));
    }
    if names
        .iter()
        .any(|name| MANIFEST_FILES.contains(&name.as_str()))
    {
        return Ok(());
    }
    if names.is_empty() {
        return none("the directory is empty".to_string());
    }
    let shown: Vec<&str> = names
        .iter()
        .take(ENTRIES_NAMED_MAX)
        .map(String::as_str)
        .collect();
    let more = names.len().saturating_sub(ENTRIES_NAMED_MAX);
    none(format!(
        "it holds {} entries ({}{}) but no manifest ({} or {})",
        names.len(),
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        },
        MANIFEST_FILES[0],
        MANIFEST_FILES[1]
    ))
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
pub(crate) mod tests {
    use super::*;
    use crate::books::{CreateRun, RunId, digest_of};
    use crate::storage::OpenMode;

    /// Every file under `dir` with its bytes, read through `storage`.
    pub(crate) fn files(storage: &dyn Storage, dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        for name in storage.list_dir(dir).unwrap() {
            let path = dir.join(&name);
            match storage.list_dir(&path) {
                Ok(_) => out.extend(files(storage, &path)),
                Err(_) => {
                    let file = storage.open(&path, OpenMode::Existing).unwrap();
                    let mut bytes = vec![0u8; usize::try_from(file.len().unwrap()).unwrap()];
                    file.read_at(0, &mut bytes).unwrap();
                    out.push((path, bytes));
                }
            }
        }
        out
    }

    fn create(engine: &Engine, name: &str) {
        engine
            .create_run(CreateRun {
                run: RunId::new(name).unwrap(),
                input_digest: digest_of(name.as_bytes()),
                agent_version: "1".into(),
                trace_id: "t".into(),
                parent: None,
                input: None,
            })
            .unwrap();
    }

    #[test]
    fn a_read_only_open_replays_a_crashed_log_in_memory_and_changes_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
        create(&engine, "a");
        create(&engine, "b");
        drop(engine); // A crash: the runs are in the log only.
        let storage = FsStorage::new();
        let before = files(&storage, dir.path());
        let engine = Engine::open_read_only(dir.path(), EngineOptions::default()).unwrap();
        assert_eq!(engine.recovery().replayed_records, 2);
        assert_eq!(engine.runs(None, None, 10).unwrap().len(), 2);
        // A command lands in the overlay, and is gone with the engine.
        create(&engine, "c");
        engine.checkpoint().unwrap();
        drop(engine);
        assert_eq!(files(&storage, dir.path()), before);
        let engine = Engine::open_read_only(dir.path(), EngineOptions::default()).unwrap();
        assert_eq!(engine.runs(None, None, 10).unwrap().len(), 2);
    }

    #[test]
    fn opens_that_need_a_database_refuse_a_directory_without_one_and_create_nothing() {
        let parent = tempfile::tempdir().unwrap();
        let missing = parent.path().join("db");
        let storage = FsStorage::new();
        for refused in [
            Engine::open_read_only(&missing, EngineOptions::default()),
            Engine::open_existing(&missing, EngineOptions::default()),
        ] {
            let Err(Error::NoDatabase { dir, found }) = refused else {
                panic!("a missing directory is refused")
            };
            assert_eq!(
                (dir, found.as_str()),
                (missing.clone(), "the directory does not exist")
            );
        }
        assert!(!storage.exists(&missing).unwrap());
        storage.create_dir_all(&missing).unwrap();
        storage
            .open(&missing.join(CREATING_MARKER), OpenMode::CreateNew)
            .unwrap();
        let Err(Error::NoDatabase { found, .. }) =
            Engine::open_existing(&missing, EngineOptions::default())
        else {
            panic!("an interrupted creation is no database")
        };
        assert!(found.contains("interrupted"), "{found}");
        assert_eq!(storage.list_dir(&missing).unwrap(), [CREATING_MARKER]);
    }
}
