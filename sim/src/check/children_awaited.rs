//! Invariant: a parent's step starts at most one child run, and never one
//! its parent does not wait for. Every run with a parent is the child a
//! wait of that parent names, and no two of the parent's waits name the
//! same child; so a crash between creating a child and recording the wait
//! can leave neither a child nobody awaits nor, after the parent re-runs
//! the step, a second child.
//!
//! In the simulation every child is started by `Engine::start_child` or
//! `Engine::start_children` (a fan-out, whose one wait names them all),
//! which commit the children and the wait together; a runtime may also
//! create children it does not wait for, which this invariant does not
//! cover.

use actum::books::{BooksRead, MemBooks};

/// `Err` naming the first child no wait of its parent names, or the step
/// that names a child twice.
pub fn children_are_awaited(books: &MemBooks) -> Result<(), String> {
    for child in books.runs() {
        let Some(parent) = &child.parent else {
            continue;
        };
        let book = books.waits(parent);
        let naming: Vec<_> = book
            .iter()
            .flat_map(|b| &b.waits)
            .filter(|w| w.wait_for.awaited_children().contains(&child.id))
            .map(|w| w.step.to_string())
            .collect();
        match naming.as_slice() {
            [_] => {}
            [] => {
                return Err(format!(
                    "run {} is a child of run {parent} ({}), but no wait of its parent names \
                     it: a child started without the wait for it",
                    child.id, child.state
                ));
            }
            many => {
                return Err(format!(
                    "child run {} of run {parent} is awaited by steps {many:?}",
                    child.id
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::test_support::*;
    use actum::books::{
        BooksWrite, FencingToken, RunId, RunState, StepId, WaitBook, WaitFor, WaitRecord,
        WaitStatus,
    };

    fn id(name: &str) -> RunId {
        RunId::new(name).expect("a valid id")
    }

    fn child_of(books: &mut MemBooks, name: &str) {
        let mut child = run_record(name, RunState::Pending);
        child.parent = Some(id("p"));
        books.put_run(child);
    }

    fn waiting_for(child: &str, step: &str) -> WaitRecord {
        WaitRecord {
            step: StepId::new(step).expect("a valid id"),
            seq: 1,
            wait_for: WaitFor::Child { run: id(child) },
            deadline_ms: None,
            opened_ms: 0,
            token: FencingToken(1),
            reason: String::new(),
            status: WaitStatus::Open,
            ended_ms: None,
        }
    }

    #[test]
    fn a_child_without_its_wait_and_a_second_child_are_caught() {
        let mut books = MemBooks::new();
        books.put_run(run_record("p", RunState::WaitingTool));
        child_of(&mut books, "p:s");
        let err = children_are_awaited(&books).expect_err("no wait names the child");
        assert!(err.contains("no wait of its parent names it"), "{err}");
        let mut book = WaitBook::new(id("p"));
        book.waits.push(waiting_for("p:s", "s"));
        books.put_waits(book.clone());
        assert!(children_are_awaited(&books).is_ok());
        // The step re-run under a fresh child id: the first child is left
        // awaited by no wait.
        child_of(&mut books, "p:s.2");
        book.waits[0] = waiting_for("p:s.2", "s");
        books.put_waits(book.clone());
        assert!(children_are_awaited(&books).is_err());
        book.waits.push(waiting_for("p:s", "t"));
        book.waits.push(waiting_for("p:s", "u"));
        books.put_waits(book);
        let err = children_are_awaited(&books).expect_err("named twice");
        assert!(err.contains("awaited by steps"), "{err}");
    }
}
