"""Where a resume's time goes: the parts of langgraph_savers.py's resume, timed
apart, over the databases a run of it left.

    target/venv/bin/python python/bench/langgraph_savers.py --dir /tmp/lgb
    target/venv/bin/python python/bench/resume_probe.py /tmp/lgb

For each durable saver (``actum``, ``sqlite``), RESTARTS times, each of
another thread: the saver's open (``open_saver``, as the bench opens it), the
graph's compile, ``get_state``, and the close the bench does not time. Prints
the median of each part in ms, one line per saver and part.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import langgraph_savers as bench  # noqa: E402

PARTS = ("open", "compile", "get_state", "close")


class TimedCalls:
    """Stands in for a saver's ``_ThreadBooks``: each method call is timed
    into ``spent`` (ms by method name) and passed on."""

    def __init__(self, calls, spent: dict[str, float]) -> None:
        self._calls = calls
        self._spent = spent

    def __getattr__(self, name: str):
        real = getattr(self._calls, name)
        if not callable(real):
            return real

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                took = (time.perf_counter() - t0) * 1000
                self._spent[name] = self._spent.get(name, 0.0) + took

        return timed


def probe(kind: str, where: Path, restarts: int, threads: int) -> dict[str, float]:
    times: dict[str, list[float]] = {part: [] for part in PARTS}
    for k in range(restarts):
        # From the middle of the bench's threads, as the bench picks them.
        tid = bench.resumed_thread(k, threads)
        config = {"configurable": {"thread_id": tid}}
        spent: dict[str, float] = {}
        t0 = time.perf_counter()
        with bench.open_saver(kind, where) as saver:
            t1 = time.perf_counter()
            graph = bench.build().compile(checkpointer=saver)
            books = getattr(saver, "_books", None)
            if books is not None:
                real_calls, books.calls = books.calls, TimedCalls(books.calls, spent)
            t2 = time.perf_counter()
            try:
                state = graph.get_state(config)
            finally:
                if books is not None:
                    books.calls = real_calls
            t3 = time.perf_counter()
            assert state.values.get("messages"), f"{tid} of {where} is empty"
        t4 = time.perf_counter()
        for part, took in zip(PARTS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            times[part].append(took * 1000)
        if books is not None:
            for name, ms in spent.items():
                times.setdefault(f"  {name}", []).append(ms)
            times.setdefault("  (rest)", []).append((t3 - t2) * 1000 - sum(spent.values()))
    return {part: round(statistics.median(ms), 2) for part, ms in times.items()}


def untimed(kind: str, where: Path, restarts: int, threads: int, read: bool) -> None:
    for k in range(restarts):
        tid = bench.resumed_thread(k, threads)
        with bench.open_saver(kind, where) as saver:
            if read:
                config = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
                assert saver.get_tuple(config) is not None, f"{tid} of {where} is empty"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", help="the --dir of a finished langgraph_savers.py run")
    p.add_argument("--restarts", type=int, default=15)
    p.add_argument("--threads", type=int, default=200, help="the bench run's --threads")
    p.add_argument("--untimed", choices=("open", "get"),
                   help="only open (and read a thread: get) and close, RESTARTS times, untimed")
    p.add_argument("--saver", choices=("actum", "sqlite"), default="actum",
                   help="the saver --untimed opens")
    args = p.parse_args()
    root = Path(args.dir)
    if args.untimed:
        untimed(args.saver, root / args.saver, args.restarts, args.threads, args.untimed == "get")
        return 0
    for kind in ("sqlite", "actum"):
        if not (root / kind).exists():
            print(f"resume_probe: no {root / kind}: run langgraph_savers.py --dir {root} first",
                  file=sys.stderr)
            return 2
        for part, ms in probe(kind, root / kind, args.restarts, args.threads).items():
            print(f"{kind:7} {part:10} {ms:7.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
