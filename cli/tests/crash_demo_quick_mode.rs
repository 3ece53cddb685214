//! `actum demo --quick`: worker processes killed with SIGKILL at random
//! points and restarted, every run completed, every transfer and mail
//! applied exactly once; and the check is real: a bank that applied a key
//! twice, or applied one with no intent, fails the demo.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use support::*;

#[test]
fn the_quick_demo_kills_workers_and_every_effect_happens_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    let out = actum(&[
        "demo",
        "--quick",
        "--seed",
        "7",
        "--dir",
        demo.to_str().unwrap(),
    ]);
    let said = stdout(&out);
    assert_eq!(code(&out), 0, "{said}{}", stderr(&out));
    assert!(said.contains("80 of 80 completed"), "{said}");
    assert!(said.contains("PASS"), "{said}");
    let kills: u32 = said
        .lines()
        .find_map(|l| l.trim().strip_prefix("kills"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(kills >= 10, "workers were killed many times: {said}");
    // The demo's own database is an ordinary one: the commands read it.
    let db = demo.join("db");
    assert_eq!(code(&actum_on(&db, &["verify", "{}"])), 0);
}

#[test]
fn the_demo_check_fails_when_a_key_was_applied_twice_or_without_an_intent() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    let demo_arg = demo.to_str().unwrap();
    let out = actum(&["demo", "--runs", "3", "--kills", "0", "--dir", demo_arg]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    // Forge the bank's file: one application repeated, one never intended.
    let bank = demo.join("bank.log");
    let text = std::fs::read_to_string(&bank).unwrap();
    let first = text.lines().next().unwrap();
    let forged = format!("{text}{first}\n1\tinvoice-00009/pay/1\t1\tpay 1 EUR\ttx-99\n");
    std::fs::write(&bank, forged).unwrap();
    let checked = actum(&["demo-check", "--runs", "3", "--dir", demo_arg]);
    let said = stdout(&checked);
    assert_eq!(code(&checked), 1, "{said}{}", stderr(&checked));
    assert!(said.contains("FAIL"), "{said}");
    let twice = first.split('\t').nth(1).unwrap();
    assert!(
        said.contains(&format!("{twice} was applied 2 times")),
        "{said}"
    );
    assert!(
        said.contains("invoice-00009/pay/1 was applied without a durable intent"),
        "{said}"
    );
    // A demo directory in use is refused, not mixed into.
    let again = actum(&["demo", "--runs", "3", "--kills", "0", "--dir", demo_arg]);
    assert_eq!(code(&again), 2, "a used directory is refused");
    assert!(stderr(&again).contains("not empty"), "{}", stderr(&again));
}
