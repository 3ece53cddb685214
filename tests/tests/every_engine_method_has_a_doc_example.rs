//! Every public method of `Engine` (a `pub fn` inside an `impl Engine {`
//! block of `engine/src/engine/*.rs`) carries a doc example that rustdoc
//! compiles and runs: a fenced block in its doc comment, plain or marked
//! `rust` (not `ignore`, `text` or any other language). The examples assert
//! what each call promises, so a method added without one fails here,
//! named by file and line.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use std::fs;
use std::path::{Path, PathBuf};

/// The engine's sources, in a fixed order.
fn engine_sources() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/src/engine");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .collect();
    files.sort();
    files
}

/// The name of the method a line declares, if it is a public method of an
/// impl block (indented once, `pub`, not `pub(crate)`).
fn public_method(line: &str) -> Option<&str> {
    let mut rest = line.strip_prefix("    pub ")?;
    for qualifier in ["const ", "async ", "unsafe "] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&rest[..end])
}

/// The doc comment lines above line `at`: walks up over the doc comment
/// and any attributes, including attributes written over several lines,
/// and stops at the end of the previous item (a line ending in `}`, `;` or
/// `{`) or a blank line.
fn doc_above<'a>(lines: &[&'a str], at: usize) -> Vec<&'a str> {
    let mut doc = Vec::new();
    for line in lines[..at].iter().rev() {
        let line = line.trim();
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim());
        } else if line.is_empty() || line.ends_with(['}', ';', '{']) {
            break;
        }
        // Anything else is part of an attribute: go on.
    }
    doc.reverse();
    doc
}

/// True if `doc` holds a closed fenced block rustdoc compiles as a
/// doctest: its opening fence is plain or marked `rust`.
fn has_compiled_example(doc: &[&str]) -> bool {
    // The info string of the block opened so far and not yet closed.
    let mut open: Option<&str> = None;
    for line in doc {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        match open.take() {
            Some("" | "rust") => return true,
            Some(_) => {}
            None => open = Some(info.trim()),
        }
    }
    false
}

#[test]
fn every_public_engine_method_has_a_compiled_doc_example() {
    let mut methods = Vec::new();
    let mut missing = Vec::new();
    for file in engine_sources() {
        let text = fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut in_engine_impl = false;
        for (at, line) in lines.iter().enumerate() {
            if line.starts_with("impl Engine {") {
                in_engine_impl = true;
            } else if line.starts_with('}') {
                in_engine_impl = false;
            } else if in_engine_impl && let Some(name) = public_method(line) {
                methods.push(name.to_string());
                if !has_compiled_example(&doc_above(&lines, at)) {
                    let name_of_file = file.file_name().unwrap().to_string_lossy();
                    missing.push(format!(
                        "engine/src/engine/{name_of_file}:{}: Engine::{name}",
                        at + 1
                    ));
                }
            }
        }
    }
    // The walk found the engine's methods, not an empty directory.
    for door in ["open", "execute"] {
        assert!(
            methods.iter().any(|m| m == door),
            "Engine::{door} not found in {methods:?}"
        );
    }
    assert!(
        missing.is_empty(),
        "{} public Engine method(s) without a doc example (a ``` block that \
         asserts what the call promises):\n{}",
        missing.len(),
        missing.join("\n")
    );
}
