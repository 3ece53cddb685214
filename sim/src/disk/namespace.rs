//! The directory tree: per directory, a durable and a volatile map of entries.
//!
//! Directory operations (create, rename, remove) change only the volatile
//! map; `sync` copies it to the durable map; a crash makes each directory's
//! maps equal again (reverted, or occasionally flushed) and forgets every
//! directory no longer reachable from the root. Files are inodes, so an entry
//! names an inode, and a renamed file keeps its content.
//!
//! **Invariant:** the root always exists; every `Entry::Dir` in any map names
//! a directory in `dirs` (directories are never removed except by the crash
//! sweep, which removes only unreachable ones); maps are `BTreeMap`s, so every
//! walk is in a fixed order.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Component, Path};

use super::errors;
use crate::rng::Rng;

/// Identifies a file's content, independent of the names pointing at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct InodeId(pub(crate) u64);

/// Identifies a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct DirId(u64);

/// The root directory, which always exists and is always durable.
pub(crate) const ROOT_DIR: DirId = DirId(0);

/// What a directory entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    File(InodeId),
    Dir(DirId),
}

#[derive(Clone, Debug, Default)]
struct Dir {
    durable: BTreeMap<String, Entry>,
    volatile: BTreeMap<String, Entry>,
}

/// A path split into its names, with its canonical spelling for messages,
/// traces and snapshots (`/a/b`; `/` for the root).
#[derive(Clone, Debug)]
pub(crate) struct SimPath {
    pub(crate) names: Vec<String>,
    pub(crate) display: String,
}

impl SimPath {
    /// Normalises `path`: the root and `.` are dropped, `..` is refused (the
    /// engine never needs it, and resolving it would need a parent map).
    /// Relative and absolute spellings name the same place.
    pub(crate) fn parse(path: &Path) -> io::Result<SimPath> {
        let shown = path.to_string_lossy();
        let mut names = Vec::new();
        for component in path.components() {
            match component {
                Component::RootDir | Component::CurDir => {}
                Component::Prefix(_) => {
                    return Err(errors::invalid_path(&shown, "prefixes are not supported"));
                }
                Component::ParentDir => {
                    return Err(errors::invalid_path(&shown, "`..` is not supported"));
                }
                Component::Normal(name) => match name.to_str() {
                    Some(name) => names.push(name.to_owned()),
                    None => return Err(errors::invalid_path(&shown, "names must be UTF-8")),
                },
            }
        }
        let display = format!("/{}", names.join("/"));
        Ok(SimPath { names, display })
    }

    /// The parent's names and this entry's name; fails for the root.
    pub(crate) fn split_last(&self) -> io::Result<(&[String], &str)> {
        match self.names.split_last() {
            Some((name, parent)) => Ok((parent, name.as_str())),
            None => Err(errors::invalid_path(
                &self.display,
                "the root is not a file",
            )),
        }
    }
}

/// All directories of one simulated disk.
#[derive(Debug)]
pub(crate) struct Namespace {
    dirs: BTreeMap<DirId, Dir>,
    next_dir_id: u64,
}

impl Namespace {
    /// A disk holding only the (durable, empty) root.
    pub(crate) fn new() -> Self {
        let mut dirs = BTreeMap::new();
        dirs.insert(ROOT_DIR, Dir::default());
        Namespace {
            dirs,
            next_dir_id: ROOT_DIR.0 + 1,
        }
    }

    fn dir(&self, id: DirId) -> &Dir {
        self.dirs
            .get(&id)
            .expect("every DirId in an entry names a live directory")
    }

    fn dir_mut(&mut self, id: DirId) -> &mut Dir {
        self.dirs
            .get_mut(&id)
            .expect("every DirId in an entry names a live directory")
    }

    /// Walks `names` from the root through volatile entries.
    pub(crate) fn resolve_dir(&self, names: &[String], shown: &str) -> io::Result<DirId> {
        let mut current = ROOT_DIR;
        for name in names {
            current = match self.dir(current).volatile.get(name) {
                Some(Entry::Dir(child)) => *child,
                Some(Entry::File(_)) => return Err(errors::not_a_directory(shown)),
                None => return Err(errors::not_found(shown)),
            };
        }
        Ok(current)
    }

    /// The parent directory of `path` and the entry (if any) it holds there.
    pub(crate) fn lookup<'p>(
        &self,
        path: &'p SimPath,
    ) -> io::Result<(DirId, &'p str, Option<Entry>)> {
        let (parent_names, name) = path.split_last()?;
        let parent = self.resolve_dir(parent_names, &path.display)?;
        let entry = self.dir(parent).volatile.get(name).copied();
        Ok((parent, name, entry))
    }

    /// The entry named `name` in `dir`, as reads see it.
    pub(crate) fn get(&self, dir: DirId, name: &str) -> Option<Entry> {
        self.dir(dir).volatile.get(name).copied()
    }

    /// Sets a volatile entry; returns the one it replaced.
    pub(crate) fn insert(&mut self, dir: DirId, name: &str, entry: Entry) -> Option<Entry> {
        self.dir_mut(dir).volatile.insert(name.to_owned(), entry)
    }

    /// Removes a volatile entry; returns it.
    pub(crate) fn remove(&mut self, dir: DirId, name: &str) -> Option<Entry> {
        self.dir_mut(dir).volatile.remove(name)
    }

    /// Creates every missing directory along `path` (volatile entries).
    pub(crate) fn create_dir_all(&mut self, path: &SimPath) -> io::Result<()> {
        let mut current = ROOT_DIR;
        for name in &path.names {
            current = match self.get(current, name) {
                Some(Entry::Dir(child)) => child,
                Some(Entry::File(_)) => return Err(errors::not_a_directory(&path.display)),
                None => {
                    let child = DirId(self.next_dir_id);
                    self.next_dir_id += 1;
                    self.dirs.insert(child, Dir::default());
                    let replaced = self.insert(current, name, Entry::Dir(child));
                    assert!(replaced.is_none());
                    child
                }
            };
        }
        Ok(())
    }

    /// The sorted names in `dir`, as reads see them.
    pub(crate) fn list(&self, dir: DirId) -> Vec<String> {
        // BTreeMap<String, _> iterates in bytewise order, as the trait asks.
        self.dir(dir).volatile.keys().cloned().collect()
    }

    /// Makes `dir`'s entries durable.
    pub(crate) fn sync(&mut self, dir: DirId) {
        let dir = self.dir_mut(dir);
        dir.durable = dir.volatile.clone();
    }

    /// Whether any entry, durable or volatile, names `inode`.
    pub(crate) fn references(&self, inode: InodeId) -> bool {
        self.dirs.values().any(|dir| {
            dir.durable
                .values()
                .chain(dir.volatile.values())
                .any(|entry| *entry == Entry::File(inode))
        })
    }

    /// Every inode named by some entry.
    pub(crate) fn referenced_inodes(&self) -> BTreeSet<InodeId> {
        let mut inodes = BTreeSet::new();
        for dir in self.dirs.values() {
            for entry in dir.durable.values().chain(dir.volatile.values()) {
                if let Entry::File(inode) = entry {
                    inodes.insert(*inode);
                }
            }
        }
        inodes
    }

    /// The crash: each directory is reverted to its durable entries, or with
    /// probability `flushed_ppm` keeps its volatile ones (all of them, so a
    /// rename within one directory stays atomic). Then every directory the
    /// root no longer reaches is forgotten. Draws one value per directory.
    pub(crate) fn crash(&mut self, rng: &mut Rng, flushed_ppm: u32) {
        for dir in self.dirs.values_mut() {
            if rng.chance_ppm(flushed_ppm) {
                dir.durable = dir.volatile.clone();
            } else {
                dir.volatile = dir.durable.clone();
            }
        }
        let mut reachable = BTreeSet::from([ROOT_DIR]);
        let mut to_visit = vec![ROOT_DIR];
        while let Some(id) = to_visit.pop() {
            for entry in self.dir(id).durable.values() {
                if let Entry::Dir(child) = entry
                    && reachable.insert(*child)
                {
                    to_visit.push(*child);
                }
            }
            assert!(reachable.len() <= self.dirs.len(), "a directory cycle");
        }
        self.dirs.retain(|id, _| reachable.contains(id));
        assert!(self.dirs.contains_key(&ROOT_DIR));
    }

    /// Every file reachable from the root through volatile entries, with its
    /// canonical path, in path order.
    pub(crate) fn files(&self) -> Vec<(String, InodeId)> {
        let mut files = Vec::new();
        let mut to_visit = vec![(ROOT_DIR, String::new())];
        while let Some((id, prefix)) = to_visit.pop() {
            for (name, entry) in &self.dir(id).volatile {
                let path = format!("{prefix}/{name}");
                match entry {
                    Entry::File(inode) => files.push((path, *inode)),
                    Entry::Dir(child) => to_visit.push((*child, path)),
                }
            }
        }
        files.sort();
        files
    }
}
