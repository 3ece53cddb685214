//! A campaign prints the same bytes whatever number of threads runs its
//! seeds (`actum-sim ... --jobs N`): each tenth of the seeds is added up in
//! seed order, so the progress lines and the totals do not depend on which
//! thread finished first.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use std::process::Command;

fn printed(args: &[&str], jobs: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_actum-sim"))
        .args(args)
        .args(["--jobs", jobs])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?} --jobs {jobs}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn agent_runtime_and_storage_campaigns_print_the_same_with_one_or_three_jobs() {
    for args in [
        &["agents", "--seeds", "12"][..],
        &["runtime", "--seeds", "12"][..],
        &["storage", "--seeds", "12"][..],
    ] {
        let one = printed(args, "1");
        assert!(one.contains("12/12 seeds passed"), "{one}");
        assert_eq!(printed(args, "3"), one, "{args:?}");
    }
}
