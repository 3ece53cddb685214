"""What bounds ActumSaver's puts with many writer threads: the bench's
16-thread phase (langgraph_savers.py) alone, with the engine's part taken out
or the collector's pauses counted.

    target/venv/bin/python python/bench/put_threads_probe.py               # 200 threads, 16 writers
    target/venv/bin/python python/bench/put_threads_probe.py --stub        # the engine's save stubbed
    target/venv/bin/python python/bench/put_threads_probe.py --no-gc       # Python's collector off

The workload's puts are recorded from an ActumSaver running the bench's graph
(so the checkpoints carry the saver's own channel versions, as in the
bench), then replayed on a fresh database by WRITERS threads, each thread's
puts in order. ``--stub`` replaces the engine call of each put
(``_ThreadBooks.save``) with one that returns the next version at once: what
is left is the saver's Python, the GIL and the threads, the most any engine
under this saver could give. Prints puts per second; per generation, how many
collections Python's cyclic collector made and how long they took; and the
process's CPU time (user and system) and context switches per put over the
replay, with the share of the two cores it kept busy (``getrusage``).
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import langgraph_savers as bench  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402


class StubSave:
    """Stands in for a saver's ``_ThreadBooks``: ``save`` answers the next
    version of the run without the engine; everything else is passed on."""

    def __init__(self, calls) -> None:
        self.calls = calls
        self.versions: dict[str, int] = {}
        self.lock = threading.Lock()

    def __getattr__(self, name: str):
        return getattr(self.calls, name)

    def save(self, name: str, _input: bytes, _parts: list, _inline: list) -> tuple[int, int]:
        with self.lock:
            self.versions[name] = self.versions.get(name, 0) + 1
            return self.versions[name], 0


def record(threads: int, where: Path) -> list[list[tuple]]:
    """Each thread's puts, in order, from the bench's graph on an ActumSaver."""
    with bench.open_saver("actum", where) as saver:
        timed = bench.Timed(saver)
        graph = bench.build().compile(checkpointer=saver)
        for i in range(threads):
            graph.invoke(
                {"messages": [HumanMessage(f"task {i}: {bench.KB}")]},
                {"configurable": {"thread_id": f"thread-{i}"}},
                durability="sync",
            )
    return timed.by_thread()


def replay(
    calls: list[list[tuple]], writers: int, where: Path, stub: bool
) -> tuple[float, list, dict]:
    """The bench's replay (``replay_puts``) on a fresh database, with the
    collector's passes timed and the process's CPU time and context switches
    over the replay counted (``getrusage``)."""
    pauses: list[tuple[int, float]] = []
    started = [0.0]

    def collected(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append((info["generation"], time.perf_counter() - started[0]))

    with bench.open_saver("actum", where) as saver:
        if stub:
            saver._books.calls = StubSave(saver._books.calls)
        gc.callbacks.append(collected)
        try:
            before = resource.getrusage(resource.RUSAGE_SELF)
            took = bench.replay_puts(saver, calls, writers)
            after = resource.getrusage(resource.RUSAGE_SELF)
        finally:
            gc.callbacks.remove(collected)
            if stub:
                saver._books.calls = saver._books.calls.calls
    puts = sum(len(c) for c in calls)
    used = {
        "user_us": (after.ru_utime - before.ru_utime) / puts * 1e6,
        "sys_us": (after.ru_stime - before.ru_stime) / puts * 1e6,
        "cores": (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) / took,
        "switches": (after.ru_nvcsw - before.ru_nvcsw + after.ru_nivcsw - before.ru_nivcsw) / puts,
    }
    return puts / took, pauses, used


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=200, help="graph threads recorded")
    p.add_argument("--writers", type=int, default=16)
    p.add_argument("--stub", action="store_true", help="stub the engine's save out")
    p.add_argument("--no-gc", action="store_true", help="turn Python's cyclic collector off")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="put-threads-"))
    calls = record(args.threads, root / "recorded")
    if args.no_gc:
        gc.disable()
    for k in range(args.repeat):
        rate, pauses, used = replay(calls, args.writers, root / f"replay-{k}", args.stub)
        by_gen = {g: [s for gen, s in pauses if gen == g] for g in (0, 1, 2)}
        collections = ", ".join(
            f"gen{g} {len(s)} ({sum(s) * 1000:.0f} ms)" for g, s in by_gen.items()
        )
        mode = "stub" if args.stub else "engine"
        print(
            f"{mode} {args.writers} writers: {rate:,.0f} puts/s; collections: {collections}; "
            f"a put: {used['user_us']:.0f} us user, {used['sys_us']:.0f} us system, "
            f"{used['switches']:.1f} context switches; cores busy {used['cores']:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
