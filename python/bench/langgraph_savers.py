"""ActumSaver beside SqliteSaver and InMemorySaver on one LangGraph workload,
in one run.

    target/venv/bin/python python/bench/langgraph_savers.py            # 200 threads x 20 supersteps
    target/venv/bin/python python/bench/langgraph_savers.py --quick    # 20 threads x 20 supersteps

The workload: a 5-node graph (planner, agent, a real ToolNode, reviewer,
writer) whose nodes add 8 messages of about 1 KB per turn to a growing
message list, run for 20 supersteps on each thread. SqliteSaver runs in WAL
mode with synchronous=FULL, so both savers are durable when put returns;
InMemorySaver is the floor.

Measured, per saver:

* bytes on disk per superstep: the database's files after the workload (and
  a clean close), less those of the same database empty, over the puts (one
  per superstep, durability "sync");
* put latency at one thread (p50, p99), over every put of the workload;
* put throughput with 16 threads writing at once: the workload's puts again
  on a fresh database, each thread's in order, the threads dealt out to 16
  writer threads;
* resume after a restart: open the database, compile the graph and
  get_state of one thread, once the workloads of both durable savers are
  done, in RESUME_PAIRS pairs: each pair resumes one thread (another in
  each pair) with SqliteSaver and with ActumSaver back to back, the first
  of the two alternating, so the machine's drift falls on both; reported
  as each saver's median and the median of the pairs' ratios.

Prints a table and writes it as JSON (--json PATH) for docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from actum.langgraph import ActumSaver

KB = "lorem ipsum dolor sit amet " * 40  # ~1 KB
MESSAGES = 1 + 8 * 4  # a finished thread's: the input, then four turns of eight
RESUME_PAIRS = 25  # resumes timed per saver, each beside one of the other's


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return f"found for {query}: {KB}"


def build():
    def planner(state: MessagesState):
        n = len(state["messages"])
        return {"messages": [AIMessage(f"plan {n}: {KB}"), AIMessage(f"plan b {n}: {KB}")]}

    def agent(state: MessagesState):
        n = len(state["messages"])
        return {"messages": [AIMessage(f"calling tools {n}: {KB}", tool_calls=[
            {"name": "lookup", "args": {"query": f"q{n}a"}, "id": f"c-{n}-a"},
            {"name": "lookup", "args": {"query": f"q{n}b"}, "id": f"c-{n}-b"},
        ])]}

    def reviewer(state: MessagesState):
        n = len(state["messages"])
        return {"messages": [AIMessage(f"review {n}: {KB}"), AIMessage(f"notes {n}: {KB}")]}

    def writer(state: MessagesState):
        return {"messages": [AIMessage(f"draft {len(state['messages'])}: {KB}")]}

    def route(state: MessagesState):
        return END if len(state["messages"]) >= MESSAGES else "planner"

    builder = StateGraph(MessagesState)
    builder.add_node("planner", planner)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_node("reviewer", reviewer)
    builder.add_node("writer", writer)
    builder.add_edge(START, "planner")
    builder.add_edge("planner", "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", "reviewer")
    builder.add_edge("reviewer", "writer")
    builder.add_conditional_edges("writer", route)
    return builder


def sqlite_files(path: Path) -> list[Path]:
    """A SQLite database's file and its ``-wal`` and ``-shm``."""
    return [path] + [Path(str(path) + s) for s in ("-wal", "-shm")]


def thread_id(i: int) -> str:
    return f"thread-{i}"


def resumed_thread(k: int, threads: int) -> str:
    """The thread the ``k``-th resume reads: from the middle of the
    workload's, another each time."""
    return thread_id((threads // 2 + k) % threads)


def clear(path: Path) -> None:
    """Removes a database an earlier run left at ``path``: a directory
    (ActumSaver's), or SqliteSaver's files."""
    if path.is_dir():
        shutil.rmtree(path)
    for p in sqlite_files(path):
        p.unlink(missing_ok=True)


def disk_bytes(path: Path) -> int:
    if path.is_file():
        paths = sqlite_files(path)
    else:
        paths = [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_blocks * 512 for p in paths if p.exists())


class Timed:
    """Wraps a saver's put to time every call."""

    def __init__(self, saver):
        self.saver = saver
        self.times: list[float] = []
        self.calls: list[tuple] = []
        real = saver.put

        def put(config, checkpoint, metadata, new_versions):
            start = time.perf_counter()
            out = real(config, checkpoint, metadata, new_versions)
            self.times.append(time.perf_counter() - start)
            self.calls.append((config, checkpoint, metadata, new_versions))
            return out

        saver.put = put

    def by_thread(self) -> list[list[tuple]]:
        """The recorded calls, grouped by thread id, each thread's in order."""
        threads: dict[str, list[tuple]] = {}
        for call in self.calls:
            threads.setdefault(call[0]["configurable"]["thread_id"], []).append(call)
        return list(threads.values())


def replay_puts(saver, threads_calls: list[list[tuple]], writers: int) -> float:
    """Puts each thread's recorded calls again on ``saver``, in order, the
    threads dealt out to ``writers`` threads writing at once; returns the
    seconds from the start signal to the last put."""
    per: list[list] = [[] for _ in range(writers)]
    for n, calls in enumerate(threads_calls):
        per[n % writers].append(calls)
    ready = threading.Barrier(writers + 1)
    failed: list[BaseException] = []

    def writer(batches):
        ready.wait()
        try:
            for calls in batches:
                for config, checkpoint, metadata, versions in calls:
                    saver.put(config, checkpoint, metadata, versions)
        except BaseException as e:  # a writer's failure fails the replay
            failed.append(e)
            raise

    workers = [threading.Thread(target=writer, args=(b,)) for b in per]
    for w in workers:
        w.start()
    ready.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    took = time.perf_counter() - t0
    if failed:
        raise RuntimeError(f"{len(failed)} of {writers} writers failed") from failed[0]
    return took


def open_saver(kind: str, where: Path):
    if kind == "actum":
        return ActumSaver.from_path(where)
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        class Durable:
            def __enter__(self):
                self.cm = SqliteSaver.from_conn_string(str(where))
                saver = self.cm.__enter__()
                saver.setup()
                saver.conn.execute("PRAGMA journal_mode=WAL")
                saver.conn.execute("PRAGMA synchronous=FULL")
                return saver

            def __exit__(self, *exc):
                return self.cm.__exit__(*exc)

        return Durable()

    class Memory:
        def __enter__(self):
            return InMemorySaver()

        def __exit__(self, *exc):
            return False

    return Memory()


def run(kind: str, threads: int, root: Path) -> dict:
    where = root / kind
    # The empty database's size, to subtract.
    with open_saver(kind, where) as saver:
        pass
    empty = disk_bytes(where) if kind != "memory" else 0
    graph_threads = [thread_id(i) for i in range(threads)]
    start = time.perf_counter()
    with open_saver(kind, where) as saver:
        timed = Timed(saver)
        graph = build().compile(checkpointer=saver)
        for tid in graph_threads:
            graph.invoke({"messages": [HumanMessage(f"task {tid}: {KB}")]},
                         {"configurable": {"thread_id": tid}}, durability="sync")
        workload_s = time.perf_counter() - start
    on_disk = disk_bytes(where) - empty if kind != "memory" else 0
    puts = len(timed.times)
    # 16 writers at once, on a fresh database: the workload's puts again.
    with open_saver(kind, root / f"{kind}-parallel") as saver:
        parallel_s = replay_puts(saver, timed.by_thread(), 16)
    times = sorted(timed.times)
    return {
        "saver": kind,
        "threads": threads,
        "supersteps": puts,
        "workload_s": round(workload_s, 2),
        "bytes_per_superstep": None if kind == "memory" else round(on_disk / puts),
        "put_p50_ms": round(statistics.median(times) * 1000, 3),
        "put_p99_ms": round(times[int(len(times) * 0.99)] * 1000, 3),
        "puts_per_s_16_threads": round(puts / parallel_s),
        "resume_ms": None,
        "resume_first_ms": None,
    }


def resume_once(kind: str, where: Path, tid: str) -> float:
    """Opens the database, compiles the graph and gets the state of
    ``tid``; the ms it took (the close is not timed)."""
    config = {"configurable": {"thread_id": tid}}
    t0 = time.perf_counter()
    with open_saver(kind, where) as saver:
        state = build().compile(checkpointer=saver).get_state(config)
        took = (time.perf_counter() - t0) * 1000
        assert len(state.values["messages"]) == MESSAGES, f"{kind}: {tid} is short"
    return took


def resume_pairs(root: Path, threads: int, pairs: int) -> tuple[dict[str, list[float]], list[float]]:
    """``pairs`` pairs of resumes, each of another thread from the middle
    of the workload's: SqliteSaver's and ActumSaver's back to back, the
    first of the two alternating. Returns each saver's times (ms, in
    order) and each pair's ActumSaver / SqliteSaver ratio."""
    took: dict[str, list[float]] = {"sqlite": [], "actum": []}
    ratios = []
    for k in range(pairs):
        tid = resumed_thread(k, threads)
        kinds = ("sqlite", "actum") if k % 2 == 0 else ("actum", "sqlite")
        got = {kind: resume_once(kind, root / kind, tid) for kind in kinds}
        for kind, ms in got.items():
            took[kind].append(ms)
        ratios.append(got["actum"] / got["sqlite"])
    return took, ratios


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=200)
    p.add_argument("--quick", action="store_true", help="20 threads")
    p.add_argument("--dir", help="where the databases go (default: a temporary directory)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    threads = 20 if args.quick else args.threads
    root = Path(args.dir or tempfile.mkdtemp(prefix="actum-langgraph-bench-"))
    # (A directory named with --dir is made if it is not there.)
    root.mkdir(parents=True, exist_ok=True)
    results = []
    for kind in ("memory", "sqlite", "actum"):
        clear(root / kind)
        clear(root / f"{kind}-parallel")
        results.append(run(kind, threads, root))
        print(f"langgraph_savers: {kind}: workload, 16 writers done", file=sys.stderr, flush=True)
    by = {r["saver"]: r for r in results}
    # Resumes once both durable savers' workloads are done, in pairs (the
    # first pair's are also reported apart: a first resume moved by 10x
    # between runs of this bench, for SQLite most).
    print(f"langgraph_savers: {RESUME_PAIRS} pairs of resumes", file=sys.stderr, flush=True)
    took, pair_ratios = resume_pairs(root, threads, RESUME_PAIRS)
    for kind, times in took.items():
        by[kind]["resume_ms"] = round(statistics.median(times), 2)
        by[kind]["resume_first_ms"] = round(times[0], 2)
    for r in results:
        print(json.dumps(r), flush=True)
    a, s = by["actum"], by["sqlite"]
    ratios = {
        "bytes_per_superstep_actum_over_sqlite": round(a["bytes_per_superstep"] / s["bytes_per_superstep"], 3),
        "put_p50_actum_over_sqlite": round(a["put_p50_ms"] / s["put_p50_ms"], 3),
        "puts_16_threads_actum_over_sqlite": round(a["puts_per_s_16_threads"] / s["puts_per_s_16_threads"], 2),
        # The median of the pairs' ratios, not the ratio of the medians.
        "resume_actum_over_sqlite": round(statistics.median(pair_ratios), 3),
    }
    print(json.dumps(ratios))
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "ratios": ratios}, indent=2))
    shutil.rmtree(root, ignore_errors=True) if not args.dir else None
    return 0


if __name__ == "__main__":
    sys.exit(main())
