//! Opens one database after a crash many times, for a profiler: `open_probe HISTORY TAIL OPENS`
//! builds a database (`actum_benches::open::build`) then opens it OPENS times and prints the
//! mean. Run: `cargo run --release -p actum-benches --example open_probe -- 10000 2048 50`.

use std::time::Duration;

use actum_benches::open::{build, open_once};
use actum_benches::scratch_dir;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers: HISTORY TAIL OPENS"))
        .collect();
    let [history, tail, opens] = args[..] else {
        panic!("usage: open_probe HISTORY TAIL OPENS");
    };
    let dir = scratch_dir();
    let built = build(dir.path(), history, tail);
    eprintln!("built {built:?}");
    let mut total = Duration::ZERO;
    for _ in 0..opens {
        total += open_once(dir.path()).0;
    }
    println!("{opens} opens, mean {:.2?}", total / opens.max(1) as u32);
}
