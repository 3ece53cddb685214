//! The books (`engine/src/books/`) are built in layers, each using only
//! itself and the layers below it, with no circle between files:
//!
//! | floor | folder | what lives there |
//! |---|---|---|
//! | 0 | `base` | names, numbers, limits, digests |
//! | 1 | `records` | the plain data of each domain and the helpers that read only it |
//! | 2 | `vocabulary` | `Command`, `Op`, `Answer`, the traits `BooksRead` / `BooksWrite` |
//! | 3 | `views` | states over the traits: `MemBooks`, `Overlay` |
//! | 4 | `fold` | `apply` (ops into a state) and the audit line of an op |
//! | 5 | `rules` | one file per domain with its `decide_*` functions |
//! | 6 | `dispatch` | `decide`, which sends each command to its rule |
//!
//! This test reads the source, outside `#[cfg(test)]` modules (tests may
//! use anything), and fails on an import that goes up a floor, on a path
//! that does not name its layer and file (`crate::books::Run` from inside
//! the books, or `super::`), and on any cycle between files, naming the
//! file and the import. The checker itself is tried on planted trees below.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The floors, lowest first.
const LAYERS: [&str; 7] = [
    "base",
    "records",
    "vocabulary",
    "views",
    "fold",
    "rules",
    "dispatch",
];

/// One source file of the books, as the checker sees it.
struct Source {
    /// Path under `books/`, with `/` separators: `rules/wait.rs`.
    rel: String,
    text: String,
}

/// The non-test files of the books and the test-only ones, read from `dir`.
fn read_books(dir: &Path) -> Vec<Source> {
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<Source>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a readable directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(root, &path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let rel = path
                .strip_prefix(root)
                .expect("under the root")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            let text = fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            out.push(Source { rel, text });
        }
    }
}

/// The floor of a file, from the first folder of its path.
fn floor_of(rel: &str) -> Option<usize> {
    let top = rel.split('/').next()?;
    LAYERS.iter().position(|layer| *layer == top)
}

/// Whether `rel` is a module only compiled for tests: `test_support.rs`, or
/// a `tests.rs` declared under `#[cfg(test)]` (checked in `problems`).
fn is_test_file(rel: &str) -> bool {
    rel == "test_support.rs" || rel.ends_with("/tests.rs")
}

/// The lines of `text` outside `#[cfg(test)]` items and comments, each with
/// its line number (from 1).
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.trim() == "#[cfg(test)]" {
            // Skip the attributes after it (one may span lines), then the
            // item: a `mod x;` line, or a block that rustfmt closes with a
            // `}` at the item's own indentation.
            let mut j = i + 1;
            let mut depth = 0i32;
            while j < lines.len() {
                let t = lines[j].trim();
                if depth == 0 && !t.starts_with("#[") {
                    break;
                }
                depth += t.matches('(').count() as i32 + t.matches('[').count() as i32;
                depth -= t.matches(')').count() as i32 + t.matches(']').count() as i32;
                j += 1;
            }
            let item = lines.get(j).copied().unwrap_or("");
            let indent = &item[..item.len() - item.trim_start().len()];
            if item.trim_end().ends_with('{') {
                let close = format!("{indent}}}");
                j += 1;
                while j < lines.len() && lines[j] != close {
                    j += 1;
                }
            }
            i = j + 1;
            continue;
        }
        let t = line.trim_start();
        if !t.starts_with("//") {
            out.push((i + 1, line));
        }
        i += 1;
    }
    out
}

/// A use of another file of the books by one line of code.
struct Import {
    line: usize,
    path: String,
    target: String,
}

/// The files of the books that `code` names, as `layer/file.rs`; a path
/// that does not name a layer and a file is returned with an empty target.
fn imports(code: &[(usize, &str)]) -> Vec<Import> {
    const PREFIX: &str = "crate::books::";
    let mut out = Vec::new();
    for (line, text) in code {
        let mut rest = *text;
        while let Some(at) = rest.find(PREFIX) {
            let after = &rest[at + PREFIX.len()..];
            let path: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let mut parts = path.split("::");
            let layer = parts.next().unwrap_or("");
            let file = parts.next().unwrap_or("");
            let target = if LAYERS.contains(&layer) && !file.is_empty() {
                format!("{layer}/{file}.rs")
            } else {
                String::new()
            };
            out.push(Import {
                line: *line,
                path: format!("{PREFIX}{path}"),
                target,
            });
            rest = &after[path.len()..];
        }
        if text.contains("super::") {
            out.push(Import {
                line: *line,
                path: "super::".to_string(),
                target: String::new(),
            });
        }
    }
    out
}

/// Everything wrong with the layering of `sources`, one sentence each.
fn problems(sources: &[Source]) -> Vec<String> {
    let mut found = Vec::new();
    let by_rel: BTreeMap<&str, &Source> = sources.iter().map(|s| (s.rel.as_str(), s)).collect();
    // file -> files it uses, for the cycle search.
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for source in sources {
        let rel = source.rel.as_str();
        if is_test_file(rel) {
            let (parent, name) = match rel.rsplit_once('/') {
                Some((dir, _)) => (format!("{dir}.rs"), "tests"),
                None => ("mod.rs".to_string(), "test_support"),
            };
            let declared_for_tests = by_rel.get(parent.as_str()).is_some_and(|p| {
                !code_lines(&p.text)
                    .iter()
                    .any(|(_, l)| l.contains(&format!("mod {name};")))
                    && p.text.contains(&format!("mod {name};"))
            });
            if !declared_for_tests {
                found.push(format!(
                    "{rel}: a test module must be declared under #[cfg(test)] in {parent}"
                ));
            }
            continue;
        }
        if rel == "mod.rs" {
            // The books' front door: it re-exports from every layer.
            continue;
        }
        let Some(floor) = floor_of(rel) else {
            found.push(format!(
                "{rel}: not in a layer folder ({}); add it to one, or add its folder to LAYERS",
                LAYERS.join(", ")
            ));
            continue;
        };
        let uses = graph.entry(rel.to_string()).or_default();
        for import in imports(&code_lines(&source.text)) {
            if import.target.is_empty() {
                found.push(format!(
                    "{rel}:{}: `{}` does not name a layer and a file; inside the books, \
                     write crate::books::<layer>::<file>::<item>",
                    import.line, import.path
                ));
                continue;
            }
            if import.target == rel {
                continue;
            }
            if !by_rel.contains_key(import.target.as_str()) {
                found.push(format!(
                    "{rel}:{}: `{}` names {}, which does not exist",
                    import.line, import.path, import.target
                ));
                continue;
            }
            let target_floor = floor_of(&import.target).expect("a layer");
            if target_floor > floor {
                found.push(format!(
                    "{rel}:{}: `{}` goes up from floor {floor} ({}) to floor {target_floor} ({})",
                    import.line, import.path, LAYERS[floor], LAYERS[target_floor]
                ));
            }
            if !uses.contains(&import.target) {
                uses.push(import.target);
            }
        }
    }
    found.extend(cycles(&graph));
    found
}

/// Each cycle of `graph` found by a depth-first search, as `a → b → a`.
fn cycles(graph: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, Vec<String>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
        found: &mut Vec<String>,
    ) {
        marks.insert(node.to_string(), Mark::Open);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match marks.get(next).copied().unwrap_or(Mark::New) {
                Mark::New => visit(next, graph, marks, stack, found),
                Mark::Open => {
                    let from = stack.iter().position(|n| n == next).expect("on the stack");
                    let mut circle = stack[from..].to_vec();
                    circle.push(next.clone());
                    found.push(format!("a circle: {}", circle.join(" → ")));
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        marks.insert(node.to_string(), Mark::Done);
    }
    let mut marks = BTreeMap::new();
    let mut found = Vec::new();
    for node in graph.keys() {
        if marks.get(node).copied().unwrap_or(Mark::New) == Mark::New {
            visit(node, graph, &mut marks, &mut Vec::new(), &mut found);
        }
    }
    found
}

fn books_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/src/books")
}

#[test]
fn every_file_of_the_books_uses_only_its_floor_and_those_below_without_a_circle() {
    let sources = read_books(&books_dir());
    let layered = sources
        .iter()
        .filter(|s| floor_of(&s.rel).is_some())
        .count();
    assert!(
        layered >= 30,
        "only {layered} files found in the layer folders of {}",
        books_dir().display()
    );
    let found = problems(&sources);
    assert!(
        found.is_empty(),
        "the books' layers are broken:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_layer_holds_a_file_and_uses_a_layer_below_or_none() {
    let sources = read_books(&books_dir());
    for layer in LAYERS {
        assert!(
            sources
                .iter()
                .any(|s| s.rel.starts_with(&format!("{layer}/")) && !s.rel.ends_with("mod.rs")),
            "layer {layer} holds no file"
        );
    }
}

fn planted(files: &[(&str, &str)]) -> Vec<String> {
    let mut sources: Vec<Source> = files
        .iter()
        .map(|(rel, text)| Source {
            rel: (*rel).to_string(),
            text: (*text).to_string(),
        })
        .collect();
    sources.sort_by(|a, b| a.rel.cmp(&b.rel));
    problems(&sources)
}

#[test]
fn an_import_up_a_floor_is_named_with_its_file_and_line() {
    let found = planted(&[
        ("records/run.rs", "use crate::books::base::ids::RunId;\n"),
        (
            "records/wait.rs",
            "use crate::books::records::run::Run;\nuse crate::books::dispatch::decide::decide;\n",
        ),
        ("base/ids.rs", ""),
        ("dispatch/decide.rs", ""),
    ]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("records/wait.rs:2: `crate::books::dispatch::decide::decide` goes up"),
        "{found:?}"
    );
}

#[test]
fn a_circle_inside_one_floor_is_named() {
    let found = planted(&[
        ("rules/a.rs", "use crate::books::rules::b::x;\n"),
        ("rules/b.rs", "fn f() { crate::books::rules::c::y(); }\n"),
        ("rules/c.rs", "use crate::books::rules::a::z;\n"),
    ]);
    assert_eq!(
        found,
        vec!["a circle: rules/a.rs → rules/b.rs → rules/c.rs → rules/a.rs".to_string()]
    );
}

#[test]
fn test_modules_may_use_anything_and_other_paths_must_name_their_layer() {
    let rules = "\
use crate::books::base::ids::RunId;

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
)]
mod tests {
    use super::*;
    use crate::books::dispatch::decide::decide;
}

#[cfg(test)]
mod more;

fn g() {
    let _ = super::other::h();
    let _ = crate::books::Run::default();
}
";
    let found = planted(&[
        ("base/ids.rs", ""),
        ("rules/x.rs", rules),
        (
            "rules/x/tests.rs",
            "use crate::books::dispatch::decide::decide;\n",
        ),
        ("dispatch/decide.rs", ""),
        ("misc/y.rs", ""),
    ]);
    assert_eq!(found.len(), 4, "{found:?}");
    assert!(
        found[0].starts_with("misc/y.rs: not in a layer folder"),
        "{found:?}"
    );
    assert!(
        found[1].starts_with("rules/x.rs:16: `super::`"),
        "{found:?}"
    );
    assert!(
        found[2].starts_with("rules/x.rs:17: `crate::books::Run::default`"),
        "{found:?}"
    );
    assert!(
        found[3].starts_with("rules/x/tests.rs: a test module must be declared"),
        "{found:?}"
    );
}
