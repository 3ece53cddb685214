"""ActumSaver under a real LangGraph graph, across reopens, from many
threads at once, with awkward thread ids, and through a rewrite cut short."""

from __future__ import annotations

import operator
import threading
from typing import Annotated, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph

import actum
from actum.langgraph import ActumSaver, _Books, _books_of


class State(TypedDict):
    log: Annotated[list[str], operator.add]
    count: int


def build():
    def plan(state: State):
        return {"log": [f"plan {state['count']}"], "count": state["count"] + 1}

    def act(state: State):
        return {"log": ["act " + "x" * 2000], "count": state["count"] + 1}

    builder = StateGraph(State)
    builder.add_node("plan", plan)
    builder.add_node("act", act)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "act")
    builder.add_edge("act", END)
    return builder


def test_a_graph_resumes_from_the_books_after_reopening(tmp_path):
    config = {"configurable": {"thread_id": "essay-1"}}
    with ActumSaver.from_path(tmp_path / "books") as saver:
        graph = build().compile(checkpointer=saver)
        graph.invoke({"log": [], "count": 0}, config)
        graph.invoke({"log": ["again"], "count": 10}, config)
        before = graph.get_state(config)
        history = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(config)]
    with ActumSaver.from_path(tmp_path / "books") as saver:
        graph = build().compile(checkpointer=saver)
        after = graph.get_state(config)
        assert after.values == before.values
        assert after.values["count"] == 12
        assert len(after.values["log"]) == 5
        again = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(config)]
        assert again == history
        # An interrupted thread goes on from its last checkpoint.
        graph.invoke(None, {"configurable": {"thread_id": "essay-1"}})
        graph.invoke({"log": [], "count": 0}, config)
        assert graph.get_state(config).values["count"] == 2


def test_what_a_thread_keeps_in_memory_is_not_tracked_by_the_collector(tmp_path):
    """A thread's kept records, value references and task writes hold no
    list, so Python's cyclic collector stops tracking them: with thousands of
    threads in memory, a full collection would otherwise walk every thread's
    history, and the saver's many small containers would set one off often
    (one collection of 73-165 ms in most 16-writer replays of the bench,
    docs/PERFORMANCE.md)."""
    import gc

    config = {"configurable": {"thread_id": "kept"}}
    for reopen in (False, True):
        with ActumSaver.from_path(tmp_path / "books") as saver:
            graph = build().compile(checkpointer=saver)
            if reopen:
                # Read back from the engine: folded from stored records (all
                # of them: the history, not only the newest checkpoint).
                assert graph.get_state(config).values["count"] == 4
                assert len(list(graph.get_state_history(config))) > 4
            else:
                graph.invoke({"log": [], "count": 0}, config)
                graph.invoke({"log": [], "count": 2}, config)
            thread = saver._books.threads["kept"]
            # A tuple is untracked by the collection that finds all it holds
            # untracked; one that holds a tuple may take a second.
            gc.collect()
            gc.collect()
            kept = [r for per_ns in thread.checkpoints.values() for r in per_ns.values()]
            refs = list(thread.blobs.values()) + list(thread.lists.values())
            writes = [w for per_id in thread.writes.values() for w in per_id.values()]
            assert kept and refs and writes
            tracked = [o for o in kept + refs + writes if gc.is_tracked(o)]
            assert tracked == [], f"still tracked after a collection: {tracked[:3]}"


def test_the_saver_lets_go_of_its_thread_leases_as_its_database_closes(tmp_path):
    # The saver holds a lease on each thread it wrote; releasing them as
    # the database closes leaves the next open nothing to release, so it
    # reads no thread until one is asked for.
    released = []

    class Spy:
        def __init__(self, calls):
            self.calls = calls

        def __getattr__(self, name):
            return getattr(self.calls, name)

        def release(self):
            released.append(self.calls.release())
            return released[-1]

    with ActumSaver.from_path(tmp_path / "books") as saver:
        graph = build().compile(checkpointer=saver)
        for n in range(3):
            graph.invoke({"log": [], "count": 0}, {"configurable": {"thread_id": f"t-{n}"}})
        # Asked directly: every lease once, then none.
        assert saver._books.calls.release() == 3
        assert saver._books.calls.release() == 0
        # A save takes its thread's lease again.
        graph.invoke({"log": [], "count": 0}, {"configurable": {"thread_id": "t-1"}})
        saver._books.calls = Spy(saver._books.calls)
    assert released == [1], "the close released t-1's lease"
    with ActumSaver.from_path(tmp_path / "books") as saver:
        graph = build().compile(checkpointer=saver)
        assert graph.get_state({"configurable": {"thread_id": "t-1"}}).values["count"] == 2
        graph.invoke({"log": [], "count": 5}, {"configurable": {"thread_id": "t-2"}})
        assert graph.get_state({"configurable": {"thread_id": "t-2"}}).values["count"] == 7


def put(saver, thread_id, n, ns=""):
    parent = None
    for i in range(n):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"n": i, "blob": b"b" * (3000 if i % 2 else 10)}
        checkpoint["channel_versions"] = {"n": i + 1, "blob": i + 1}
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
        if parent:
            config["configurable"]["checkpoint_id"] = parent
        stored = saver.put(config, checkpoint, {"step": i}, {"n": i + 1, "blob": i + 1})
        parent = stored["configurable"]["checkpoint_id"]
    return parent


def test_threads_write_at_once(tmp_path):
    with ActumSaver.from_path(tmp_path / "books") as saver:
        errors = []

        def worker(t):
            try:
                put(saver, f"thread-{t % 4}", 20, ns=f"w{t}")
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        workers = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not errors, errors
    with ActumSaver.from_path(tmp_path / "books") as saver:
        for t in range(8):
            found = list(saver.list({"configurable": {"thread_id": f"thread-{t % 4}", "checkpoint_ns": f"w{t}"}}))
            assert [f.metadata["step"] for f in found] == list(reversed(range(20)))
            assert found[0].checkpoint["channel_values"]["blob"] == b"b" * 3000


AWKWARD = ["a", "a.", "A", "", " ", "lg.x", "ü/ß", "x" * 500, "a\x00b", "\ud800", "7"]


def test_thread_ids_are_any_strings_and_never_share(tmp_path):
    with ActumSaver.from_path(tmp_path / "books") as saver:
        for i, tid in enumerate(AWKWARD):
            put(saver, tid, i + 1)
    with ActumSaver.from_path(tmp_path / "books") as saver:
        for i, tid in enumerate(AWKWARD):
            found = list(saver.list({"configurable": {"thread_id": tid}}))
            assert len(found) == i + 1, tid
            assert all(f.config["configurable"]["thread_id"] == tid for f in found)
        everything = list(saver.list(None))
        assert len(everything) == sum(range(1, len(AWKWARD) + 1))
        assert {f.config["configurable"]["thread_id"] for f in everything} == set(AWKWARD)


class CutAfterWriting:
    """The engine calls, with ``retire`` failing once: a crash after a
    rewrite wrote the new generation and before it retired the old."""

    def __init__(self, calls):
        self.calls = calls
        self.cut = True

    def __getattr__(self, name):
        return getattr(self.calls, name)

    def retire(self, names):
        if self.cut:
            self.cut = False
            raise OSError("power cut")
        return self.calls.retire(names)


def test_a_rewrite_cut_short_keeps_the_complete_generation(tmp_path):
    with ActumSaver.from_path(tmp_path / "books") as saver:
        latest = put(saver, "t", 5)
        books: _Books = _books_of(saver.engine)
        books.calls = CutAfterWriting(books.calls)
        with pytest.raises(OSError):
            saver.prune(["t"], strategy="keep_latest")
        assert len(books.calls.runs("lg.")) == 2, "both generations are on disk"
    with ActumSaver.from_path(tmp_path / "books") as saver:
        found = list(saver.list({"configurable": {"thread_id": "t"}}))
        assert [f.config["configurable"]["checkpoint_id"] for f in found] == [latest]
        assert found[0].checkpoint["channel_values"]["blob"] == b"b" * 10
        # The reader retired the older generation.
        assert len(_books_of(saver.engine).calls.runs("lg.")) == 1


def test_a_generation_written_in_part_is_ignored(tmp_path):
    with ActumSaver.from_path(tmp_path / "books") as saver:
        latest = put(saver, "t", 3)
        calls = _books_of(saver.engine).calls
        [(name, _, _)] = calls.runs("lg.")
        # A rewrite that announced two checkpoints and wrote one.
        newer = name[:-8] + "00000001"
        calls.save(newer, "t".encode(), [("e", b"\x00", None), ("plan", b"2", None)])
    with ActumSaver.from_path(tmp_path / "books") as saver:
        found = list(saver.list({"configurable": {"thread_id": "t"}}))
        assert found[0].config["configurable"]["checkpoint_id"] == latest
        assert len(found) == 3
        assert [r[0] for r in _books_of(saver.engine).calls.runs("lg.")] == [name]


def test_a_closed_engine_and_wrong_types_raise(tmp_path):
    with pytest.raises(TypeError):
        ActumSaver("not an engine")
    engine = actum.Engine.open(tmp_path / "books")
    saver = ActumSaver(engine)
    engine.close()
    with pytest.raises(actum.EngineClosed):
        saver.get_tuple({"configurable": {"thread_id": "t"}})


def test_a_task_write_lands_once_and_an_error_is_replaced(tmp_path):
    with ActumSaver.from_path(tmp_path / "books") as saver:
        latest = put(saver, "t", 1)
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": latest}}
        saver.put_writes(config, [("ch", "first"), ("__error__", "boom 1")], "task-1")
        # A retried put_writes (the task ran again) changes no ordinary write.
        saver.put_writes(config, [("ch", "second"), ("__error__", "boom 2")], "task-1")
        saver.put_writes(config, [("ch", "other task")], "task-2")
    with ActumSaver.from_path(tmp_path / "books") as saver:
        writes = saver.get_tuple({"configurable": {"thread_id": "t"}}).pending_writes
        assert sorted(writes) == [
            ("task-1", "__error__", "boom 2"),
            ("task-1", "ch", "first"),
            ("task-2", "ch", "other task"),
        ]


def test_puts_from_many_threads_share_fsyncs(tmp_path):
    # LangGraph puts from a thread pool: calls on different threads run in
    # the engine at once and group commit makes one fsync serve several.
    with ActumSaver.from_path(tmp_path / "books") as saver:
        calls = _books_of(saver.engine).calls
        before = calls.commits_and_fsyncs()
        workers = [threading.Thread(target=put, args=(saver, f"pool-{t}", 30)) for t in range(16)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        commits, fsyncs = (a - b for a, b in zip(calls.commits_and_fsyncs(), before))
        assert commits >= 16 * 30
        assert commits / fsyncs > 1.5, f"{commits} commits, {fsyncs} fsyncs"


class Counting:
    """The engine calls, counting the bytes each save wrote."""

    def __init__(self, calls):
        self.calls = calls
        self.written = []

    def __getattr__(self, name):
        return getattr(self.calls, name)

    def save(self, name, input, parts, inline=()):
        version, written = self.calls.save(name, input, parts, list(inline))
        # The engine counts the blobs it wrote; parts held inline (asked,
        # whole and at most 1 KiB) are written in the checkpoint's metadata,
        # counted here.
        held = sum(
            len(data)
            for part, data, base in parts
            if part in inline and base is None and len(data) <= 1024
        )
        self.written.append(written + held)
        return version, written


def test_bytes_grow_with_the_change_not_the_history(tmp_path):
    from langchain_core.messages import AIMessage

    message = "m" * 1000
    with ActumSaver.from_path(tmp_path / "books") as saver:
        books = _books_of(saver.engine)
        books.calls = counting = Counting(books.calls)
        messages, parent = [], None
        for step in range(40):
            # A superstep adds eight 1 KB messages to a growing list.
            messages = messages + [AIMessage(f"{step}.{i} {message}") for i in range(8)]
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"messages": messages}
            checkpoint["channel_versions"] = {"messages": step + 1}
            config = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
            if parent:
                config["configurable"]["checkpoint_id"] = parent
            parent = saver.put(config, checkpoint, {"step": step}, {"messages": step + 1})[
                "configurable"
            ]["checkpoint_id"]
        # About 8 KB of messages and a record per superstep, not the whole
        # list (320 KB by the end).
        assert max(counting.written[1:]) < 8 * 1024 + 2048, counting.written
        assert sum(counting.written) < 40 * (8 * 1024 + 2048)
    with ActumSaver.from_path(tmp_path / "books") as saver:
        got = saver.get_tuple({"configurable": {"thread_id": "long"}}).checkpoint["channel_values"]
        assert [m.content for m in got["messages"]] == [m.content for m in messages]
        # A list that is not the last one plus items is stored whole, and
        # still reads back.
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": list(reversed(messages))}
        checkpoint["channel_versions"] = {"messages": 99}
        saver.put({"configurable": {"thread_id": "long", "checkpoint_ns": ""}}, checkpoint, {}, {"messages": 99})
        got = saver.get_tuple({"configurable": {"thread_id": "long"}}).checkpoint["channel_values"]
        assert [m.content for m in got["messages"]] == [m.content for m in reversed(messages)]


def test_a_task_write_and_the_put_that_appends_it_store_its_items_once(tmp_path):
    from langchain_core.messages import AIMessage

    def message(name):
        return AIMessage(f"{name} " + "m" * 1000, id=name)

    def put(saver, parent, messages, version):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": messages}
        checkpoint["channel_versions"] = {"messages": version}
        config = {"configurable": {"thread_id": "once", "checkpoint_ns": ""}}
        if parent:
            config["configurable"]["checkpoint_id"] = parent
        return saver.put(config, checkpoint, {}, {"messages": version})["configurable"]["checkpoint_id"]

    first = [message(f"a{i}") for i in range(4)]
    new = [message("b0"), message("b1")]
    with ActumSaver.from_path(tmp_path / "books") as saver:
        books = _books_of(saver.engine)
        books.calls = counting = Counting(books.calls)
        c1 = put(saver, None, first, 1)
        # The node's write: the two messages the next put appends.
        config = {"configurable": {"thread_id": "once", "checkpoint_ns": "", "checkpoint_id": c1}}
        saver.put_writes(config, [("messages", new)], "task-1")
        c2 = put(saver, c1, first + new, 2)
        put_first, write, put_next = counting.written
        assert put_first > 4 * 1000 and write > 2 * 1000, counting.written
        # The put appends the same frames the write stored: only its record is new.
        assert put_next < 1000, counting.written
    with ActumSaver.from_path(tmp_path / "books") as saver:
        one = saver.get_tuple({"configurable": {"thread_id": "once", "checkpoint_id": c1}})
        assert one.pending_writes == [("task-1", "messages", new)]
        assert type(one.pending_writes[0][2]) is list
        two = saver.get_tuple({"configurable": {"thread_id": "once", "checkpoint_id": c2}})
        assert two.checkpoint["channel_values"]["messages"] == first + new


def _fresh_newest(path, thread_id, ns, full):
    """The newest checkpoint of ``ns`` as a saver opened anew reads it: from
    the tail of the thread's records, or (``full``) after a list() that
    folds all of them."""
    with ActumSaver.from_path(path) as saver:
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
        if full:
            list(saver.list(config))
        found = saver.get_tuple(config)
        thread = _books_of(saver.engine).threads[thread_id]
        return found, thread.full


def _random_move(saver, rng, k, versions, counter):
    """One random call on thread ``t``; returns the id counter."""
    ns = rng.choice(["", "", "sub"])
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ns}}
    ids = [t.config["configurable"]["checkpoint_id"] for t in saver.list(config)]
    move = rng.random()
    if move < 0.6 or not ids:
        counter += 1
        # Mostly rising ids; now and then one below the newest.
        checkpoint = empty_checkpoint()
        checkpoint["id"] = (
            f"{counter:06d}" if rng.random() < 0.85 else f"{rng.randrange(counter):06d}x"
        )
        # Each channel changes in some puts only: a value may lie many
        # checkpoints back.
        changed = {c: versions[ns].get(c, 0) + 1 for c in ["a", "b", "c"] if rng.random() < 0.4}
        versions[ns].update(changed)
        checkpoint["channel_versions"] = dict(versions[ns])
        checkpoint["channel_values"] = {
            c: rng.choice([k, b"v" * 3000, [f"item {i} " * 40 for i in range(k)]]) for c in changed
        }
        if ids:
            config["configurable"]["checkpoint_id"] = rng.choice(ids)
        saver.put(config, checkpoint, {"step": k, "run_id": f"r{k % 3}"}, changed)
    elif move < 0.85:
        # A write to an existing checkpoint, or to one not put yet.
        target = rng.choice(ids) if rng.random() < 0.8 else f"{counter + 1:06d}"
        config["configurable"]["checkpoint_id"] = target
        saver.put_writes(config, [("a", k), ("__error__", f"e{k}")], f"task-{rng.randrange(3)}")
    elif move < 0.9:
        saver.prune(["t"], strategy="keep_latest")
    elif move < 0.95:
        # Another thread's checkpoints, some with ids below t's, join t.
        for j in range(2):
            checkpoint = empty_checkpoint()
            checkpoint["id"] = f"{rng.randrange(counter + 3):06d}u{j}"
            checkpoint["channel_versions"] = {"a": 1}
            checkpoint["channel_values"] = {"a": f"from u {j}"}
            other = {"configurable": {"thread_id": "u", "checkpoint_ns": ns}}
            saver.put(other, checkpoint, {"step": k, "run_id": "ru"}, {"a": 1})
        saver.copy_thread("u", "t")
    else:
        saver.delete_for_runs([f"r{rng.randrange(3)}"])
    return counter


def _newest(path, ns, full):
    """The newest checkpoint of ``ns`` of thread ``t`` as a saver opened
    anew reads it: from the tail of the thread's records, or (``full``)
    after a list() that folds all of them; and whether all were folded."""
    with ActumSaver.from_path(path) as saver:
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ns}}
        if full:
            list(saver.list(config))
        found = saver.get_tuple(config)
        return found, _books_of(saver.engine).threads["t"].full


@pytest.mark.parametrize("seed", range(30))
def test_the_newest_checkpoint_read_from_the_tail_is_the_one_read_from_everything(
    tmp_path, seed, monkeypatch
):
    # Random histories: ids out of order, writes before their checkpoint,
    # channels left unchanged for many puts, two namespaces, rewrites; read
    # anew after every few calls, and written on after a read from the tail.
    # Rewrites spread over many engine checkpoints (two value parts each)
    # and short first scans make reads from the tail reach into them.
    import random

    import actum.langgraph

    monkeypatch.setattr(actum.langgraph, "_PARTS_PER_SAVE", 2)
    monkeypatch.setattr(actum.langgraph, "_TAIL_ROWS", 2)

    rng = random.Random(seed)
    path = tmp_path / "books"
    versions: dict[str, dict[str, int]] = {"": {}, "sub": {}}
    counter = 0
    for segment in range(5):
        with ActumSaver.from_path(path) as saver:
            # A read from the tail first, then calls that need everything.
            saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
            for k in range(segment * 10, segment * 10 + 10):
                counter = _random_move(saver, rng, k, versions, counter)
        for ns in ["", "sub"]:
            tail, _ = _newest(path, ns, full=False)
            everything, _ = _newest(path, ns, full=True)
            assert tail == everything, f"seed {seed}, segment {segment}, ns {ns!r}"


class CountingScans:
    """The engine calls, counting the engine checkpoints scans read."""

    def __init__(self, calls):
        self.calls = calls
        self.rows = 0

    def __getattr__(self, name):
        return getattr(self.calls, name)

    def scan(self, *args):
        found = self.calls.scan(*args)
        self.rows += len(found)
        return found

    def pick(self, *args):
        found = self.calls.pick(*args)
        self.rows += len(found)
        return found


def test_a_resume_reads_the_tail_of_a_long_thread_and_a_write_reads_the_rest(tmp_path):
    config = {"configurable": {"thread_id": "long"}}
    with ActumSaver.from_path(tmp_path / "books") as saver:
        graph = build().compile(checkpointer=saver)
        for turn in range(20):
            graph.invoke({"log": [f"turn {turn}"], "count": turn}, config)
        before = graph.get_state(config)
        versions = saver._books.threads["long"].version
    assert versions > 60
    with ActumSaver.from_path(tmp_path / "books") as saver:
        books = _books_of(saver.engine)
        books.calls = counting = CountingScans(books.calls)
        graph = build().compile(checkpointer=saver)
        assert graph.get_state(config) == before
        # The newest put and what was written beside it, then the engine
        # checkpoints its ``at`` names (the values it kept from the turn's
        # first puts): a handful of the thread's engine checkpoints. (How
        # many depends on the order LangGraph's background writes landed.)
        tail = counting.rows
        assert 2 <= tail <= 6
        assert not books.threads["long"].full
        # A write needs the whole thread (the id it may put, the lists it
        # may extend): it is read then, the tail again with it.
        graph.invoke({"log": ["once more"], "count": 0}, config)
        assert books.threads["long"].full
        assert counting.rows == tail + versions
        assert graph.get_state(config).values["count"] == 2


def _put_chain(path, puts) -> int:
    """Puts ``puts`` (each a checkpoint id, None for a fresh one, its
    channel versions and values, and its new versions) in order on thread
    "t", each the child of the one before; returns how many engine
    checkpoints the thread took."""
    with ActumSaver.from_path(path) as saver:
        parent = None
        for i, (checkpoint_id, versions, values, new) in enumerate(puts):
            checkpoint = empty_checkpoint()
            if checkpoint_id is not None:
                checkpoint["id"] = checkpoint_id
            checkpoint["channel_versions"] = versions
            checkpoint["channel_values"] = values
            config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            if parent:
                config["configurable"]["checkpoint_id"] = parent
            stored = saver.put(config, checkpoint, {"step": i}, new)
            parent = stored["configurable"]["checkpoint_id"]
        return saver._books.threads["t"].version


def test_a_value_kept_from_long_ago_is_read_from_where_the_newest_put_says(tmp_path):
    # Channel "a" is written by the first put only, "b" by every put: the
    # newest checkpoint still names a's first version.
    path = tmp_path / "books"
    _put_chain(
        path,
        [
            (None, {"a": 1, "b": i + 1}, {"a": "a" * 2000, "b": i}, {"a": 1, "b": i + 1})
            if i == 0
            else (None, {"a": 1, "b": i + 1}, {"b": i}, {"b": i + 1})
            for i in range(40)
        ],
    )
    with ActumSaver.from_path(path) as saver:
        books = _books_of(saver.engine)
        books.calls = counting = CountingScans(books.calls)
        found = saver.get_tuple({"configurable": {"thread_id": "t"}})
        assert found.checkpoint["channel_values"] == {"a": "a" * 2000, "b": 39}
        # The two newest engine checkpoints, then the first, which holds a.
        assert counting.rows == 3
        assert not books.threads["t"].full


def test_a_resume_that_must_read_the_whole_thread_reads_each_engine_checkpoint_once(tmp_path):
    # The newest put's id is below an earlier one's (ids out of order), so
    # it is not marked top: the tail read falls back to the whole thread,
    # and the rows it read on the way are not read again.
    path = tmp_path / "books"
    versions = _put_chain(
        path,
        [
            (f"id-{i + 1 if i < 29 else 0:03}", {"b": i + 1}, {"b": i}, {"b": i + 1})
            for i in range(30)
        ],
    )
    with ActumSaver.from_path(path) as saver:
        books = _books_of(saver.engine)
        books.calls = counting = CountingScans(books.calls)
        found = saver.get_tuple({"configurable": {"thread_id": "t"}})
        # The highest id, not the newest put.
        assert found.checkpoint["id"] == "id-029"
        assert found.checkpoint["channel_values"] == {"b": 28}
        assert books.threads["t"].full
        assert counting.rows == versions


def test_a_thread_run_made_for_another_thread_id_is_refused(tmp_path):
    # Thread ids map to run names by the first 160 bits of their SHA-256;
    # the run keeps the id it was made for, and a read checks it.
    from actum.langgraph import _run_name, _thread_key

    path = tmp_path / "books"
    with ActumSaver.from_path(path) as saver:
        calls = _books_of(saver.engine).calls
        calls.save(_run_name(_thread_key("t"), 0), b"not t", [("e", b"\x00", None)])
    with ActumSaver.from_path(path) as saver:
        with pytest.raises(ValueError, match="another thread id than 't'"):
            saver.get_tuple({"configurable": {"thread_id": "t"}})


def test_a_rewrite_keeps_each_record_with_the_parts_it_names(tmp_path, monkeypatch):
    # A rewrite packs records and their value parts into engine checkpoints
    # of at most _PARTS_PER_SAVE parts; a record's parts are named in the
    # checkpoint that holds the record, so a record never straddles two.
    import actum.langgraph

    monkeypatch.setattr(actum.langgraph, "_PARTS_PER_SAVE", 3)
    path = tmp_path / "books"
    with ActumSaver.from_path(path) as saver:
        parent = None
        for i in range(4):
            checkpoint = empty_checkpoint()
            checkpoint["channel_versions"] = {"a": i + 1, "b": i + 1}
            checkpoint["channel_values"] = {"a": bytes([i]) * 2000, "b": bytes([i + 9]) * 2000}
            config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            if parent:
                config["configurable"]["checkpoint_id"] = parent
            stored = saver.put(config, checkpoint, {"step": i}, {"a": i + 1, "b": i + 1})
            parent = stored["configurable"]["checkpoint_id"]
        before = list(saver.list({"configurable": {"thread_id": "t"}}))
        saver.copy_thread("t", "copy")
    with ActumSaver.from_path(path) as saver:
        after = list(saver.list({"configurable": {"thread_id": "copy"}}))
        assert [a.checkpoint for a in after] == [b.checkpoint for b in before]
