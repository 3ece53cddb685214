"""actum.langgraph: a LangGraph checkpointer kept in an actum database.

``ActumSaver`` is a ``BaseCheckpointSaver``: LangGraph's checkpoints, the
pending writes of its tasks and its channel values, kept in the engine's
journal and state store, durable when each call returns::

    from actum.langgraph import ActumSaver

    with ActumSaver.from_path("/var/lib/myagent/graph") as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"messages": [...]}, {"configurable": {"thread_id": "t-1"}})

How a thread is kept (docs/PYTHON.md, "The LangGraph checkpointer"):

* A thread is an engine run named ``lg.<first 40 hex digits of the SHA-256
  of the thread id>.<generation>``, created with the thread id as its input:
  two thread ids never share a run (a hash collision is refused by the
  engine as another input, not merged).
* Each ``put`` and each ``put_writes`` is one checkpoint of that run, one
  engine command: it lands whole or not at all, and is durable when the
  call returns. Its part ``e`` holds the call's record (the checkpoint's
  header, metadata and parent, or the task's writes); values larger than
  ``INLINE_BYTES`` are parts of their own, content-addressed by the engine,
  so a value stored before is not written again. Only the channels in
  ``new_versions`` are stored: a superstep writes what it changed.
* Reading a thread the first time reads the ``e`` parts of its checkpoints
  in one engine read and folds them; after that the saver answers from
  memory (one process owns a database directory, and every saver over one
  ``actum.Engine`` shares that memory and its per-thread locks).
* ``delete_for_runs``, ``prune`` and ``copy_thread`` write the surviving
  records as the thread's next generation (a new run, whose first
  checkpoint says how many it holds), then retire the old one (cancelled
  and pruned: its blobs no other run references are freed). A crash
  between the two leaves both; the next reader keeps the complete newer
  generation and retires the rest.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import struct
import threading
import zlib
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import copy_context
from pathlib import Path
from typing import Any, NamedTuple, Optional

import ormsgpack
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.tools import BaseTool, ToolException
from langchain_core.tools import tool as lc_tool
from pydantic import ConfigDict
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ._actum import Engine, _ThreadBooks
from . import ToolFailed

__all__ = [
    "INLINE_BYTES",
    "LIST_TYPE",
    "ActumSaver",
    "CallKeys",
    "ExactlyOnceTool",
    "JournaledModel",
    "UnknownEffect",
    "current_call",
    "exactly_once",
    "journaled",
]

#: Values this size or smaller are kept inside the record of their call;
#: larger ones are parts of their own, stored once by content.
INLINE_BYTES = 1024
#: The run names of threads start with this.
RUN_PREFIX = "lg."
#: Parts per engine checkpoint, below the engine's limit (1,024) with room
#: for the record itself.
_PARTS_PER_SAVE = 1000
#: Bytes of value parts per engine checkpoint when a generation is written,
#: below the engine's 64 MiB limit on a checkpoint.
_BYTES_PER_SAVE = 48 * 1024 * 1024
_FRAME = struct.Struct("<I")
#: The parts the engine is asked to hold in a checkpoint's metadata when
#: they fit (1 KiB): the records, new with every put, and a generation's
#: plan. A load of a thread scans its records, which then lie in the run's
#: metadata rows side by side instead of one blob each.
_HELD_INLINE = ["e", "plan"]

#: How many engine checkpoints a load of a thread's newest checkpoint reads
#: first, from the newest back (then four times as many each time, until
#: what the newest names is found).
_TAIL_ROWS = 2


def _thread_key(thread_id: str) -> str:
    return hashlib.sha256(_thread_bytes(thread_id)).hexdigest()[:40]


def _thread_bytes(thread_id: str) -> bytes:
    return thread_id.encode("utf-8", "surrogatepass")


def _run_name(key: str, generation: int) -> str:
    return f"{RUN_PREFIX}{key}.{generation:08x}"


def _generation_of(name: str) -> int:
    return int(name.rsplit(".", 1)[1], 16)


# A part ``e`` is one codec byte, then the frames: 0 as they are, 1
# compressed with zlib (the records repeat long channel-version strings, and
# a rewrite's batch of them compresses to about a third). One put's record is
# a few hundred bytes, which zlib shrinks by a quarter at a cost of a tenth
# of a durable put, so frames shorter than _COMPRESS_FROM stay as they are.
_RAW, _ZLIB = 0, 1
_COMPRESS_FROM = 1024


def _frames(records: Sequence[dict]) -> bytes:
    out = bytearray()
    for record in records:
        packed = ormsgpack.packb(record)
        out += _FRAME.pack(len(packed))
        out += packed
    if len(out) >= _COMPRESS_FROM:
        squeezed = zlib.compress(bytes(out), 1)
        if len(squeezed) < len(out):
            return bytes([_ZLIB]) + squeezed
    return bytes([_RAW]) + bytes(out)


def _unframe(part: bytes, where: str) -> list[dict]:
    if not part:
        raise ValueError(f"{where}: the record part is empty")
    codec, data = part[0], part[1:]
    if codec == _ZLIB:
        try:
            data = zlib.decompress(data)
        except zlib.error as e:
            raise ValueError(f"{where}: the record part does not decompress: {e}") from e
    elif codec != _RAW:
        raise ValueError(f"{where}: unknown record codec {codec}")
    records = []
    at = 0
    while at < len(data):
        if at + _FRAME.size > len(data):
            raise ValueError(f"{where}: a record's length is cut at byte {at}")
        (size,) = _FRAME.unpack_from(data, at)
        at += _FRAME.size
        if at + size > len(data):
            raise ValueError(f"{where}: a record of {size} bytes at byte {at} is cut")
        records.append(ormsgpack.unpackb(data[at : at + size]))
        at += size
    return records


class _Thread:
    """One thread's records, folded: what ``InMemorySaver`` keeps, with
    values by reference into the thread's run."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.key = _thread_key(thread_id)
        self.lock = threading.Lock()
        self.loaded = False
        # Whether every record of the live generation is folded; a load of
        # the newest checkpoint alone folds only the records since the one
        # that holds its oldest channel value (``tops`` names it).
        self.full = False
        # ns -> the id of its newest checkpoint, where only the tail is folded
        self.tops: dict[str, str] = {}
        # ns -> the highest checkpoint id put in it (once ``full``)
        self.highest: dict[str, str] = {}
        # (ns, channel, version) -> the engine checkpoint whose record holds
        # its reference (what a put's ``at`` names)
        self.holders: dict[tuple[str, str, Any], int] = {}
        self.run: str | None = None  # the live generation's run, once written
        self.generation = 0
        self.version = 0  # its newest checkpoint
        # ns -> checkpoint id -> put record
        self.checkpoints: dict[str, dict[str, dict]] = {}
        # (ns, checkpoint id) -> (task id, idx) -> [task id, channel, ref, task path]
        self.writes: dict[tuple[str, str], dict[tuple[str, int], list]] = {}
        # (ns, channel, version) -> ref
        self.blobs: dict[tuple[str, str, Any], list] = {}
        # (ns, channel) -> the located reference of the last list stored for
        # it as a part: what the next one may extend.
        self.lists: dict[tuple[str, str], list] = {}
        # (ns, channel) -> the list put last: its items, their frames, and
        # (when it was hashed) a SHA-256 state after its bytes.
        self.frames: dict[tuple[str, str], _ListCache] = {}
        # (ns, checkpoint id) -> its checkpoint, decoded by a tail read and
        # not yet handed out: the first ``_tuple`` of it takes it (a dict
        # LangGraph may change, so handed out once).
        self.decoded: dict[tuple[str, str], Any] = {}

    def reset(self) -> None:
        self.tops.clear()
        self.highest.clear()
        self.holders.clear()
        self.checkpoints.clear()
        self.writes.clear()
        self.blobs.clear()
        self.lists.clear()
        self.frames.clear()
        self.decoded.clear()

    def fold(self, record: dict, version: int) -> None:
        """Applies one record (and keeps it: the caller gives it up); part
        references in it are to ``version``."""
        ns = record["ns"]
        if record["t"] == "p":
            # A put of an id read before replaces what was decoded of it.
            self.decoded.pop((ns, record["id"]), None)
            # Kept without its value references (folded into ``blobs``
            # below; a rewrite builds them again from there), without ``at``
            # (the engine checkpoints holding the values of the channels it
            # did not change: ``holders`` knows them) and with tuples
            # for its two lists: what a thread keeps then holds no list, so
            # Python's collector stops tracking it and its full collections
            # do not walk every thread's history.
            refs = record.pop("bl")
            record.pop("at", None)
            record["cp"] = tuple(record["cp"])
            record["md"] = tuple(record["md"])
            self.checkpoints.setdefault(ns, {})[record["id"]] = record
            if record["id"] > self.highest.get(ns, ""):
                self.highest[ns] = record["id"]
            for channel, ver, ref in refs:
                located = _located(ref, version)
                key = (ns, channel, _hashable(ver))
                self.blobs[key] = located
                self.holders[key] = version
                if located[0] == "p" and located[3] is not None:
                    self.lists[(ns, channel)] = located
        elif record["t"] == "w":
            writes = self.writes.setdefault((ns, record["id"]), {})
            for idx, channel, ref in record["w"]:
                writes[(record["task"], idx)] = (
                    record["task"],
                    channel,
                    _located(ref, version),
                    record["path"],
                )
        else:
            raise ValueError(f"thread {self.thread_id!r}: unknown record kind {record['t']!r}")


def _is_top(record: dict, highest: dict[str, str], written: Any) -> bool:
    """Whether a put record may be served as its namespace's newest
    checkpoint from the records from it on: its id is above every id put in
    its namespace before it (``highest``: ns -> id) and nothing was written
    to it before it (``written`` holds (ns, id) of the writes so far)."""
    ns, checkpoint_id = record["ns"], record["id"]
    return checkpoint_id > highest.get(ns, "") and (ns, checkpoint_id) not in written


def _hashable(version: Any) -> Any:
    return tuple(version) if isinstance(version, list) else version


# A value reference: ``["i", type, bytes]`` inline, ``["e"]`` empty (a
# channel in new_versions without a value), or ``["p", part, type, list]``: a
# part of the checkpoint that holds the record, where ``list`` is None or,
# for a list stored as frames, ``[items, bytes, sha256 hex of the bytes]``
# (for a task write's list, which is never an append base, just its item
# count).
# In memory a reference is a tuple (so what a thread keeps is not tracked by
# Python's collector) and a part reference also carries the checkpoint's
# version (``_located``); on its way into a rewrite it carries the run too
# (``_absolute``).


def _absolute(ref: Sequence, run: str | None) -> Sequence:
    """A located part reference with the run that holds it."""
    if ref[0] == "p":
        return [*ref, run]
    return ref


def _located(ref: Sequence, version: int) -> tuple:
    """A reference as stored, as a tuple; a part reference with the version
    of the checkpoint that holds it."""
    if ref[0] == "p" and len(ref) == 4:
        listed = ref[3]
        if isinstance(listed, list):
            # (A tuple inside the reference: one more collection of Python's
            # collector before it stops tracking what holds it.)
            listed = tuple(listed)
        return (ref[0], ref[1], ref[2], listed, version)
    return tuple(ref)


class _ListCache(NamedTuple):
    """The list put last for a channel: its items (the objects), their
    frames, and, once hashed, the SHA-256 state after its bytes with its
    size and hex digest, so the next put of a list that extends it hashes
    only the new bytes."""

    items: list
    frames: list
    hasher: Any
    size: int
    digest: str | None


#: The type of a list stored as frames, one per item, each item serialized
#: on its own, so a list that grew by appending is saved as its new items
#: only (the engine's append form of a part).
LIST_TYPE = "actum-list"
_ITEM = struct.Struct("<IB")


def _item_frame(serde: SerializerProtocol, item: Any) -> bytes:
    typ, data = serde.dumps_typed(item)
    name = typ.encode()
    return _ITEM.pack(len(data), len(name)) + name + data


def _stored(typ: str, data: bytes, listed: Any, parts: list[tuple[str, bytes, Any]]) -> list:
    """A value's reference: inline if small (or the save has all the parts
    it may), else a part of its own appended to ``parts``."""
    if len(data) <= INLINE_BYTES or len(parts) >= _PARTS_PER_SAVE:
        return ["i", typ, data]
    name = f"v{len(parts)}"
    parts.append((name, data, None))
    return ["p", name, typ, listed]


def _items(serde: SerializerProtocol, data: bytes, where: str) -> list:
    items = []
    at = 0
    while at < len(data):
        if at + _ITEM.size > len(data):
            raise ValueError(f"{where}: an item's header is cut at byte {at}")
        size, name_len = _ITEM.unpack_from(data, at)
        at += _ITEM.size
        end = at + name_len + size
        if end > len(data):
            raise ValueError(f"{where}: an item of {size} bytes at byte {at} is cut")
        typ = data[at : at + name_len].decode()
        items.append(serde.loads_typed((typ, data[at + name_len : end])))
        at = end
    return items


class _Books:
    """Every saver over one engine shares this: the engine calls, the
    threads read so far, and a lock per thread."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.calls = _ThreadBooks(engine)
        self.lock = threading.Lock()
        self.threads: dict[str, _Thread] = {}

    def thread(self, thread_id: str) -> _Thread:
        with self.lock:
            found = self.threads.get(thread_id)
            if found is None:
                found = self.threads[thread_id] = _Thread(thread_id)
            return found


_BOOKS_LOCK = threading.Lock()
_BOOKS: dict[int, _Books] = {}


def _books_of(engine: Engine) -> _Books:
    with _BOOKS_LOCK:
        books = _BOOKS.get(id(engine))
        if books is None or books.engine is not engine:
            books = _BOOKS[id(engine)] = _Books(engine)
        return books


def _forget_books(engine: Engine) -> None:
    with _BOOKS_LOCK:
        books = _BOOKS.get(id(engine))
        if books is not None and books.engine is engine:
            del _BOOKS[id(engine)]


class ActumSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer over an open ``actum.Engine``.

    Thread-safe: LangGraph's thread pool may call ``put`` and
    ``put_writes`` at once; calls on one thread are serialized, calls on
    different threads run in the engine together and share its fsyncs.
    The ``a``-methods run the sync ones on a worker thread.
    """

    def __init__(self, engine: Engine, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        if not isinstance(engine, Engine):
            raise TypeError(f"ActumSaver needs an actum.Engine, not {type(engine).__name__}")
        self.engine = engine
        self._books = _books_of(engine)

    @classmethod
    @contextmanager
    def from_path(
        cls, path: str | Path, *, serde: SerializerProtocol | None = None
    ) -> Iterator[ActumSaver]:
        """Opens (or creates) the database in the directory ``path`` (or in
        the PostgreSQL database a ``postgres://`` URL names, as
        ``Engine.open`` does) and yields a saver over it; closes the
        database on the way out."""
        engine = Engine.open(path)
        saver = None
        try:
            saver = cls(engine, serde=serde)
            yield saver
        finally:
            try:
                # The thread leases go before the database closes, so the
                # next open reads no thread it is not asked for.
                if saver is not None and not engine.closed:
                    saver._books.calls.release()
            finally:
                _forget_books(engine)
                engine.close()

    # ----- loading and writing a thread -----

    def _open(self, thread_id: Any) -> _Thread:
        """The thread, read from the engine if this process has not yet,
        with its lock held by the caller."""
        return self._books.thread(str(thread_id))

    def _load(self, thread: _Thread, known: dict[int, list[dict]] | None = None) -> None:
        """Reads the whole of the thread's live generation (under its lock).
        ``known`` holds the records of engine checkpoints a tail read of it
        just read (version -> records, not folded yet): those from some
        version to the newest are not read again."""
        if thread.loaded and thread.full:
            return
        if not thread.loaded:
            self._live(thread)
        thread.reset()
        if thread.run is not None:
            run = thread.run
            held = thread.version + 1
            while known and held - 1 in known:
                held -= 1
            found = self._books.calls.scan(run, "e", 1, held - 1) if held > 1 else []
            for version, part in found:
                if part is None:
                    continue
                for record in _unframe(part, f"checkpoint {version} of thread run {run}"):
                    thread.fold(record, version)
            for version in range(held, thread.version + 1):
                for record in known[version]:  # type: ignore[index]
                    thread.fold(record, version)
        thread.loaded = thread.full = True

    def _load_tail(self, thread: _Thread, ns: str) -> None:
        """Reads as much of the thread's live generation as its newest
        checkpoint in ``ns`` needs (under its lock, on a thread not read
        yet), and folds it: the engine checkpoints from the newest back to
        that put, and those its ``at`` names for the values it keeps from
        earlier puts. Only a put record marked ``top`` (its id above every
        id put in its namespace before it, and no write to it before it)
        is served so; where the newest put is not marked, a value it names
        is not found so, or every checkpoint was read, the whole generation
        is folded."""
        self._live(thread)
        thread.reset()
        if thread.run is None:
            thread.loaded = thread.full = True
            return
        run, calls = thread.run, self._books.calls
        rows: dict[int, list[dict]] = {}
        needed: set = set()

        def read(found: list) -> None:
            for version, part in found:
                where = f"checkpoint {version} of thread run {run}"
                rows[version] = [] if part is None else _unframe(part, where)

        def resolve(version: int) -> None:
            for record in rows[version]:
                if record["t"] == "p" and record["ns"] == ns:
                    for channel, ver, _ in record["bl"]:
                        needed.discard((channel, _hashable(ver)))

        top = None
        hi, span = thread.version, _TAIL_ROWS

        def back() -> list:
            nonlocal hi, span
            found = calls.scan(run, "e", max(1, hi - span + 1), hi)
            read(found)
            hi, span = hi - span, span * 4
            return found

        # Back from the newest checkpoint to the namespace's newest put.
        while top is None and hi >= 1:
            for version, _ in reversed(back()):
                puts = [r for r in rows[version] if r["t"] == "p" and r["ns"] == ns]
                if puts:
                    top = puts[-1]
                    break
        if top is not None and top.get("top"):
            decoded = self.serde.loads_typed(tuple(top["cp"]))
            versions = decoded["channel_versions"]
            needed.update((c, _hashable(v)) for c, v in versions.items())
            for version in rows:
                resolve(version)
            at = top.get("at", {})
            picks = sorted({at[c] for c, _ in needed if c in at} - rows.keys())
            if picks:
                read(calls.pick(run, "e", picks))
                for version in picks:
                    resolve(version)
        if top is not None and (needed or not top.get("top")):
            thread.loaded = True
            return self._load(thread, rows)
        for version in sorted(rows):
            for record in rows[version]:
                thread.fold(record, version)
        thread.loaded = True
        thread.full = len(rows) == thread.version
        if not thread.full:
            thread.tops[ns] = top["id"]
            thread.decoded[(ns, top["id"])] = decoded

    def _live(self, thread: _Thread) -> None:
        """Finds the thread's live generation (retiring stale ones) and
        sets the thread's run, generation and newest version to it: the
        newest one not cancelled and complete (holding the checkpoints its
        first one announced in its plan; generation 0 announces none)."""
        calls = self._books.calls
        expected = _thread_bytes(thread.thread_id)
        runs = calls.generations(f"{RUN_PREFIX}{thread.key}.", expected)
        live = None
        stale = []
        for name, state, latest, plan, same in sorted(
            runs, key=lambda r: _generation_of(r[0]), reverse=True
        ):
            complete = latest is not None and (plan is None or latest >= int(plan.decode()))
            if live is None and state != "cancelled" and complete:
                live = (name, latest, same)
            else:
                stale.append(name)
        if stale:
            calls.retire(stale)
        if live is None:
            thread.run, thread.generation, thread.version = None, 0, 0
        else:
            name, latest, same = live
            if not same:
                raise ValueError(
                    f"thread run {name} belongs to another thread id than {thread.thread_id!r} "
                    "(the first 160 bits of their SHA-256 collide)"
                )
            thread.run, thread.generation, thread.version = name, _generation_of(name), latest

    def _save(self, thread: _Thread, records: list[dict], parts: list[tuple[str, bytes, Any]]) -> None:
        """Writes ``records`` (and the value parts they name) as the next
        checkpoint of the thread's live run, then folds them."""
        if thread.run is None:
            thread.run, thread.generation, thread.version = _run_name(thread.key, 0), 0, 0
        version, _ = self._books.calls.save(
            thread.run,
            _thread_bytes(thread.thread_id),
            [("e", _frames(records), None), *parts],
            _HELD_INLINE,
        )
        if version != thread.version + 1:
            thread.loaded = False
            raise RuntimeError(
                f"thread run {thread.run}: saved checkpoint {version}, expected "
                f"{thread.version + 1} (another writer?); the thread is read again next time"
            )
        thread.version = version
        for record in records:
            thread.fold(record, version)

    def _value(self, thread: _Thread, ref: list) -> Any:
        kind = ref[0]
        if kind == "i":
            if ref[1] == LIST_TYPE:
                return _items(self.serde, ref[2], f"a list of thread {thread.thread_id!r}")
            return self.serde.loads_typed((ref[1], ref[2]))
        if kind == "p":
            _, name, typ, listed, version = ref
            (data,) = self._books.calls.load(thread.run, version, [name])
            if data is None:
                raise ValueError(
                    f"checkpoint {version} of thread run {thread.run} has no part {name}"
                )
            if listed is not None:
                return _items(self.serde, data, f"part {name} of checkpoint {version} of {thread.run}")
            return self.serde.loads_typed((typ, data))
        raise ValueError(f"thread {thread.thread_id!r}: unknown value reference {kind!r}")

    def _ref(self, value: Any, parts: list[tuple[str, bytes, Any]]) -> list:
        return _stored(*self.serde.dumps_typed(value), None, parts)

    def _write_ref(self, value: Any, parts: list[tuple[str, bytes, Any]]) -> list:
        """A task's write: a list as frames, one per item, as a put stores
        a list's new items (``_list_ref``); anything else as ``_ref``. A
        node's write to an appended channel (messages) is the items the next
        put appends, the same objects serialized the same way: their frames
        are the same bytes, so the engine, which stores a part once by
        content, keeps them once."""
        if type(value) is not list:
            return self._ref(value, parts)
        whole = b"".join(_item_frame(self.serde, item) for item in value)
        return _stored(LIST_TYPE, whole, len(value), parts)

    def _list_ref(
        self, thread: _Thread, ns: str, channel: str, items: list, parts: list[tuple[str, bytes, Any]]
    ) -> list:
        """A list value as frames: inline if small; else a part, in append
        form when the list stored last for the channel is a prefix of it
        (the new items are all the bytes it writes). The frames of the list
        put last are kept with its items, so the items it shares with this
        one (the same objects, as LangGraph's reducers pass them on) are
        not serialized again."""
        cached = thread.frames.get((ns, channel))
        frames = []
        if cached is not None:
            for old, new, frame in zip(cached.items, items, cached.frames):
                if old is not new:
                    break
                frames.append(frame)
        # The whole cached list is a prefix of this one: its hash state is
        # this one's after its bytes.
        extends = cached is not None and len(frames) == len(cached.items) > 0
        frames.extend(_item_frame(self.serde, item) for item in items[len(frames) :])
        whole = b"".join(frames)
        if len(whole) <= INLINE_BYTES or len(parts) >= _PARTS_PER_SAVE:
            thread.frames[(ns, channel)] = _ListCache(list(items), frames, None, len(whole), None)
            return ["i", LIST_TYPE, whole]
        if extends and cached.hasher is not None:
            hasher = cached.hasher.copy()
            hasher.update(memoryview(whole)[cached.size :])
        else:
            hasher = hashlib.sha256(whole)
        digest = hasher.hexdigest()
        thread.frames[(ns, channel)] = _ListCache(list(items), frames, hasher, len(whole), digest)
        listed = [len(items), len(whole), digest]
        name = f"v{len(parts)}"
        last = thread.lists.get((ns, channel))
        if last is not None:
            _, base_name, _, (count, size, stored), base_version = last
            if count < len(items) and (
                # The list stored last is the one cached, all of which this
                # one starts with (the same objects).
                (extends and (len(cached.items), cached.size, cached.digest) == (count, size, stored))
                or (
                    sum(len(f) for f in frames[:count]) == size
                    and hashlib.sha256(memoryview(whole)[:size]).hexdigest() == stored
                )
            ):
                parts.append((name, whole[size:], (base_version, base_name)))
                return ["p", name, LIST_TYPE, listed]
        parts.append((name, whole, None))
        return ["p", name, LIST_TYPE, listed]

    # ----- reading -----

    def _tuple(self, thread: _Thread, ns: str, checkpoint_id: str) -> CheckpointTuple:
        record = thread.checkpoints[ns][checkpoint_id]
        checkpoint: Checkpoint | None = thread.decoded.pop((ns, checkpoint_id), None)
        if checkpoint is None:
            checkpoint = self.serde.loads_typed(tuple(record["cp"]))
        values = {}
        for channel, ver in checkpoint["channel_versions"].items():
            ref = thread.blobs.get((ns, channel, _hashable(ver)))
            if ref is None or ref[0] == "e":
                continue
            values[channel] = self._value(thread, ref)
        writes = thread.writes.get((ns, checkpoint_id), {})
        ordered = sorted(writes.items(), key=lambda kv: (kv[1][3], kv[0][0], kv[0][1]))
        parent = record["parent"]
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread.thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint={**checkpoint, "channel_values": values},
            metadata=self.serde.loads_typed(tuple(record["md"])),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread.thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=[
                (task, channel, self._value(thread, ref))
                for task, channel, ref, _ in (w for _, w in ordered)
            ],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        configurable = config["configurable"]
        thread = self._open(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        with thread.lock:
            if not thread.loaded:
                self._load_tail(thread, ns)
            if not thread.full:
                top = thread.tops.get(ns)
                if top is not None and checkpoint_id in (None, top):
                    return self._tuple(thread, ns, top)
                self._load(thread)
            checkpoints = thread.checkpoints.get(ns)
            if not checkpoints:
                return None
            if checkpoint_id is None:
                checkpoint_id = max(checkpoints)
            elif checkpoint_id not in checkpoints:
                return None
            return self._tuple(thread, ns, checkpoint_id)

    def _thread_ids(self) -> list[str]:
        """Every thread's id, from the runs of the database."""
        calls = self._books.calls
        ids = set()
        for name, state, _ in calls.runs(RUN_PREFIX):
            if state == "cancelled":
                continue
            data = calls.input(name)
            if data is not None:
                ids.add(data.decode("utf-8", "surrogatepass"))
        return sorted(ids)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if config is not None:
            thread_ids = [str(config["configurable"]["thread_id"])]
            wanted_ns = config["configurable"].get("checkpoint_ns")
            wanted_id = get_checkpoint_id(config)
        else:
            thread_ids, wanted_ns, wanted_id = self._thread_ids(), None, None
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        for thread_id in thread_ids:
            thread = self._open(thread_id)
            with thread.lock:
                self._load(thread)
                found = []
                for ns, checkpoints in thread.checkpoints.items():
                    if wanted_ns is not None and ns != wanted_ns:
                        continue
                    for checkpoint_id in sorted(checkpoints, reverse=True):
                        if wanted_id and checkpoint_id != wanted_id:
                            continue
                        if before_id and checkpoint_id >= before_id:
                            continue
                        if filter:
                            metadata = self.serde.loads_typed(tuple(checkpoints[checkpoint_id]["md"]))
                            if not all(metadata.get(k) == v for k, v in filter.items()):
                                continue
                        if remaining is not None:
                            if remaining <= 0:
                                break
                            remaining -= 1
                        found.append(self._tuple(thread, ns, checkpoint_id))
            yield from found
            if remaining is not None and remaining <= 0:
                return

    # ----- writing -----

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        ns = configurable.get("checkpoint_ns", "")
        header = checkpoint.copy()
        values: dict[str, Any] = header.pop("channel_values", {})  # type: ignore[misc]
        thread = self._open(thread_id)
        with thread.lock:
            self._load(thread)
            parts: list[tuple[str, bytes, Any]] = []
            blobs = []
            for channel, version in new_versions.items():
                if channel not in values:
                    ref = ["e"]
                elif type(values[channel]) is list:
                    ref = self._list_ref(thread, ns, channel, values[channel], parts)
                else:
                    ref = self._ref(values[channel], parts)
                blobs.append([channel, version, ref])
            record = self._put_record(config, checkpoint, metadata, header, blobs)
            if _is_top(record, thread.highest, thread.writes):
                record["top"] = True
                # Where the values it keeps from earlier puts are: a read
                # of this checkpoint alone reads those engine checkpoints.
                at = {}
                for channel, version in checkpoint["channel_versions"].items():
                    if channel not in new_versions:
                        held = thread.holders.get((ns, channel, _hashable(version)))
                        if held is not None:
                            at[channel] = held
                if at:
                    record["at"] = at
            self._save(thread, [record], parts)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _put_record(self, config, checkpoint, metadata, header, blobs) -> dict:
        configurable = config["configurable"]
        ns = configurable.get("checkpoint_ns", "")
        return {
            "t": "p",
            "ns": ns,
            "id": checkpoint["id"],
            "parent": configurable.get("checkpoint_id"),
            "cp": list(self.serde.dumps_typed(header)),
            "md": list(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
            "bl": blobs,
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        configurable = config["configurable"]
        ns = configurable.get("checkpoint_ns", "")
        checkpoint_id = configurable["checkpoint_id"]
        thread = self._open(configurable["thread_id"])
        with thread.lock:
            self._load(thread)
            stored = thread.writes.get((ns, checkpoint_id), {})
            parts: list[tuple[str, bytes, Any]] = []
            landing = []
            for idx, (channel, value) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(channel, idx)
                # A task's ordinary write lands once (a retried put_writes
                # changes nothing); its special writes (error, interrupt,
                # ...) replace the last.
                if idx >= 0 and (task_id, idx) in stored:
                    continue
                landing.append([idx, channel, self._write_ref(value, parts)])
            if not landing:
                return
            record = {
                "t": "w",
                "ns": ns,
                "id": checkpoint_id,
                "task": task_id,
                "path": task_path,
                "w": landing,
            }
            self._save(thread, [record], parts)

    # ----- rewriting and deleting -----

    def delete_thread(self, thread_id: str) -> None:
        thread = self._open(thread_id)
        with thread.lock:
            names = [name for name, _, _ in self._books.calls.runs(f"{RUN_PREFIX}{thread.key}.")]
            self._books.calls.retire(names)
            thread.reset()
            thread.run, thread.generation, thread.version = None, 0, 0
            thread.loaded = thread.full = True

    def _records(self, origin: _Thread, keep: dict[str, set[str]]) -> list[dict]:
        """The records of the checkpoints in ``keep`` (ns -> ids) of
        ``origin``, each with its writes and the values its channel versions
        name, part references made absolute (``[..., version, run]``)."""
        records = []
        for ns, ids in sorted(keep.items()):
            for checkpoint_id in sorted(ids):
                put = dict(origin.checkpoints[ns][checkpoint_id])
                checkpoint = self.serde.loads_typed(tuple(put["cp"]))
                put["bl"] = [
                    [channel, ver, _absolute(ref, origin.run)]
                    for channel, ver in checkpoint["channel_versions"].items()
                    if (ref := origin.blobs.get((ns, channel, _hashable(ver)))) is not None
                ]
                records.append(put)
                for (task, idx), (_, channel, ref, path) in sorted(
                    origin.writes.get((ns, checkpoint_id), {}).items()
                ):
                    records.append(
                        {
                            "t": "w",
                            "ns": ns,
                            "id": checkpoint_id,
                            "task": task,
                            "path": path,
                            "w": [[idx, channel, _absolute(ref, origin.run)]],
                        }
                    )
        return records

    def _rewrite(self, thread: _Thread, records: list[dict]) -> None:
        """Writes ``records`` (from ``_records``) as the thread's next
        generation, then retires every older run of the thread, and reads
        the thread again. Under the thread's lock."""
        calls = self._books.calls
        # Each engine checkpoint of the generation carries at most
        # _PARTS_PER_SAVE value parts and _BYTES_PER_SAVE bytes of them. The
        # value bytes are read and saved again: the engine holds them by
        # content already, so saving them writes no value bytes.
        batches: list[tuple[list[dict], list[tuple[str, bytes, Any]]]] = [([], [])]
        size = 0
        read: dict[tuple[str, int, str], bytes] = {}
        highest: dict[str, str] = {}
        written: set = set()
        for record in records:
            field = "bl" if record["t"] == "p" else "w"
            if record["t"] == "p":
                # A rewritten put names all its values itself (no ``at``).
                record = {k: v for k, v in record.items() if k not in ("top", "at")}
                if _is_top(record, highest, written):
                    record["top"] = True
                highest[record["ns"]] = max(highest.get(record["ns"], ""), record["id"])
            else:
                written.add((record["ns"], record["id"]))
            values = []
            for _, _, ref in record[field]:
                if ref[0] == "p":
                    _, name, _, _, version, run = ref
                    data = read.get((run, version, name))
                    if data is None:
                        (data,) = calls.load(run, version, [name])
                        if data is None:
                            raise ValueError(
                                f"checkpoint {version} of thread run {run} has no part {name}"
                            )
                        read[(run, version, name)] = data
                    values.append(data)
            # A record and the parts it names go in one engine checkpoint
            # (its part names are that checkpoint's).
            grown = size + sum(len(data) for data in values)
            if batches[-1][0] and (
                len(batches[-1][1]) + len(values) > _PARTS_PER_SAVE or grown > _BYTES_PER_SAVE
            ):
                batches.append(([], []))
                size = 0
            parts = batches[-1][1]
            fresh = iter(values)
            moved = []
            for first, second, ref in record[field]:
                if ref[0] == "p":
                    data = next(fresh)
                    part = f"v{len(parts)}"
                    parts.append((part, data, None))
                    size += len(data)
                    ref = ["p", part, ref[2], ref[3]]
                moved.append([first, second, ref])
            batches[-1][0].append({**record, field: moved})
        old = [name for name, _, _ in calls.runs(f"{RUN_PREFIX}{thread.key}.")]
        if records:
            generation = max((_generation_of(n) for n in old), default=-1) + 1
            name = _run_name(thread.key, generation)
            for number, (batch, parts) in enumerate(batches):
                if number == 0:
                    # The generation is complete once it holds this many.
                    parts = [*parts, ("plan", str(len(batches)).encode(), None)]
                version, _ = calls.save(
                    name,
                    _thread_bytes(thread.thread_id),
                    [("e", _frames(batch), None), *parts],
                    _HELD_INLINE,
                )
                if version != number + 1:
                    raise RuntimeError(
                        f"thread run {name}: wrote checkpoint {version}, expected {number + 1}"
                    )
        calls.retire(old)
        thread.loaded = False
        self._load(thread)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        doomed = {str(r) for r in run_ids}
        if not doomed:
            return
        for thread_id in self._thread_ids():
            thread = self._open(thread_id)
            with thread.lock:
                self._load(thread)
                keep: dict[str, set[str]] = {}
                dropped = False
                for ns, checkpoints in thread.checkpoints.items():
                    for checkpoint_id, record in checkpoints.items():
                        metadata = self.serde.loads_typed(tuple(record["md"]))
                        if str(metadata.get("run_id")) in doomed:
                            dropped = True
                        else:
                            keep.setdefault(ns, set()).add(checkpoint_id)
                if dropped:
                    self._rewrite(thread, self._records(thread, keep))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        source = self._open(source_thread_id)
        target = self._open(target_thread_id)
        if source is target:
            return
        first, second = sorted([source, target], key=lambda t: t.thread_id)
        with first.lock, second.lock:
            self._load(source)
            self._load(target)
            if not source.checkpoints:
                return
            # The target keeps what it had; the source's checkpoints join it
            # (one with the same id replaces the target's).
            everything = lambda t: {ns: set(c) for ns, c in t.checkpoints.items()}  # noqa: E731
            records = self._records(target, everything(target)) + self._records(
                source, everything(source)
            )
            self._rewrite(target, records)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            thread = self._open(thread_id)
            with thread.lock:
                self._load(thread)
                if all(len(c) <= 1 for c in thread.checkpoints.values()):
                    continue
                keep = {ns: {max(c)} for ns, c in thread.checkpoints.items() if c}
                self._rewrite(thread, self._records(thread, keep))

    # ----- async: the sync methods on a worker thread -----

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


# ----- exactly-once tools and journaled model calls -----

#: The run that keeps a thread's ledger: tool calls and model answers. It
#: is not rewritten by prune or copy_thread, and outlives delete_thread (the
#: effects it records happened in the world).
LEDGER_PREFIX = "lx."


class UnknownEffect(Exception):
    """Whether a tool call took effect is not known, and its class forbids
    sending it again (``not_idempotent``) or its query could not tell: a
    person must look (``actum reconcile`` with the key)."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"tool call {key}: outcome unknown: {reason}")
        self.key = key
        self.reason = reason


class CallKeys:
    """What an exactly-once tool receives: the call's idempotency key (the
    same on every resend of the call), the fencing token of the lease it
    runs under, and whether this is a resend."""

    __slots__ = ("key", "token", "resend")

    def __init__(self, key: str, token: int, resend: bool) -> None:
        self.key, self.token, self.resend = key, token, resend

    def __repr__(self) -> str:
        return f"CallKeys(key={self.key!r}, token={self.token}, resend={self.resend})"


_CURRENT: contextvars.ContextVar[CallKeys | None] = contextvars.ContextVar(
    "actum_langgraph_call", default=None
)


def current_call() -> CallKeys | None:
    """Inside an exactly-once tool: its key, token and resend flag."""
    return _CURRENT.get()


def _stable_ns(ns: str) -> str:
    """The namespace without task ids (``node:task-id|child:task-id`` ->
    ``node|child``): a task LangGraph runs again may get a new id."""
    return "|".join(part.split(":", 1)[0] for part in ns.split("|")) if ns else ""


def _ledger_and_step(config: RunnableConfig | None, what: str, name: str) -> tuple[str, str, str]:
    config = ensure_config(config)
    configurable = config.get("configurable", {})
    if "thread_id" not in configurable:
        raise ValueError(
            f"{what} {name!r} runs exactly once per thread: call it inside a graph run "
            "with a thread_id in its config"
        )
    thread_id = str(configurable["thread_id"])
    ns = _stable_ns(configurable.get("checkpoint_ns", ""))
    return thread_id, LEDGER_PREFIX + _thread_key(thread_id), ns


def _step_name(prefix: str, *parts: str) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    return f"{prefix}{digest[:40]}"


def _receipt(serde: SerializerProtocol, value: Any) -> bytes:
    typ, data = serde.dumps_typed(value)
    return typ.encode() + b"\x00" + data


def _from_receipt(serde: SerializerProtocol, receipt: bytes) -> Any:
    typ, _, data = receipt.partition(b"\x00")
    return serde.loads_typed((typ.decode(), data))


_KINDS = ("idempotent", "queryable", "not_idempotent")


class ExactlyOnceTool(BaseTool):
    """A LangGraph tool whose calls go through the thread's ledger (see
    ``exactly_once``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    saver: Any
    kind: str
    window_ms: Optional[int] = None  # noqa: UP045 (pydantic on 3.9)
    query: Optional[Callable[..., Any]] = None  # noqa: UP045
    attempts: int = 3

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover (invoke is the door)
        raise NotImplementedError("an exactly-once tool is called with a tool call")

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if not (isinstance(input, dict) and input.get("type") == "tool_call" and input.get("id")):
            raise ValueError(
                f"the exactly-once tool {self.name!r} is called with a tool call (a ToolNode "
                "or a model's tool_calls): its key comes from the call's id"
            )
        config = ensure_config(config)
        thread_id, ledger, ns = _ledger_and_step(config, "tool", self.name)
        call_id = str(input["id"])
        args = dict(input.get("args", {}))
        serde = self.saver.serde
        injected = getattr(self.inner, "_injected_args_keys", frozenset())
        plain = {k: v for k, v in args.items() if k not in injected}
        args_bytes = json.dumps(plain, sort_keys=True, default=str).encode()

        def act(key: str, token: int, resend: bool) -> bytes:
            keys = CallKeys(key, token, resend)
            given = {"idempotency_key": key, "fencing_token": token, "call_keys": keys}
            extra = {k: v for k, v in given.items() if k in injected}
            mark = _CURRENT.set(keys)
            try:
                out = self.inner.invoke({**input, "args": {**args, **extra}}, config)
            finally:
                _CURRENT.reset(mark)
            return _receipt(serde, self._message(out, call_id))

        def query(key: str, token: int) -> bytes | None:
            found = self.query(CallKeys(key, token, True))
            if found is None:
                return None
            return _receipt(serde, self._message(found, call_id))

        # A retryable failure (the tool said so, or its query found no
        # record of an earlier attempt) opens the next attempt, under a new
        # key, up to `attempts` in all.
        for _ in range(self.attempts):
            status, key, payload, raised = self.saver._books.calls.step(
                ledger,
                _thread_bytes(thread_id),
                _step_name("t.", ns, call_id),
                self.name,
                self.kind,
                args_bytes,
                act,
                query=query if self.kind == "queryable" else None,
                window_ms=self.window_ms,
            )
            if status != "retryable":
                break
        if status in ("done", "replayed"):
            return self._message(_from_receipt(serde, payload), call_id)
        reason = payload.decode("utf-8", "replace")
        if status == "unknown":
            raise UnknownEffect(key, reason) from raised
        raise ToolException(f"{self.name} ({key}) failed: {reason}") from raised

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        return await asyncio.to_thread(copy_context().run, self.invoke, input, config)

    def _message(self, out: Any, call_id: str) -> ToolMessage:
        if isinstance(out, ToolMessage):
            return out
        content = out if isinstance(out, (str, list)) else json.dumps(out, default=str)
        return ToolMessage(content=content, tool_call_id=call_id, name=self.name)


def exactly_once(
    tool: Any,
    saver: ActumSaver,
    *,
    kind: str,
    window_ms: int | None = None,
    query: Callable[[CallKeys], Any] | None = None,
    attempts: int = 3,
) -> ExactlyOnceTool:
    """Wraps a LangGraph tool so each of its calls takes effect once.

    The call's key comes from the thread, the namespace (without task ids)
    and the tool call's id, never from a fresh id: a node LangGraph runs
    again after a crash (with the model call journaled by ``journaled``, so
    the tool call ids are the same) makes the same keys. Before the tool
    runs, its intent is durable in the thread's ledger; its answer is
    recorded after. Called again, a confirmed call answers its stored
    ``ToolMessage`` and does not run; a call whose outcome was never
    recorded (the process died while it ran) is, by ``kind``:

    * ``"idempotent"`` (the tool deduplicates by key for ``window_ms``):
      sent again with the same key;
    * ``"queryable"``: ``query(CallKeys)`` is asked whether the key took
      effect (the tool's answer, or None for "no record"), never sent again;
      "no record" must be final (the request can no longer arrive), and
      opens the next attempt;
    * ``"not_idempotent"``: not sent again; ``UnknownEffect`` is raised for
      a person to settle.

    The tool receives its key and fencing token as the arguments
    ``idempotency_key`` / ``fencing_token`` / ``call_keys`` if it declares
    them as injected (``Annotated[str, InjectedToolArg]``), and from
    ``current_call()`` always. A retryable failure (``actum.ToolFailed(...,
    retryable=True)``, or a query's "no record") opens the next attempt under
    a new key, up to ``attempts`` in all; a failure is a ``ToolException``
    (LangGraph's ToolNode turns it into an error message for the model).
    """
    if kind not in _KINDS:
        raise ValueError(f"unknown tool kind {kind!r}: one of {', '.join(_KINDS)}")
    if kind == "idempotent" and window_ms is None:
        raise ValueError("an idempotent tool needs window_ms: how long it remembers a key")
    if kind == "queryable" and query is None:
        raise ValueError("a queryable tool needs query: how to ask whether a key took effect")
    if not isinstance(saver, ActumSaver):
        raise TypeError(f"exactly_once keeps its ledger in an ActumSaver, not {type(saver).__name__}")
    if not isinstance(tool, BaseTool):
        tool = lc_tool(tool)
    return ExactlyOnceTool(
        name=tool.name,
        description=tool.description,
        args_schema=tool.args_schema,
        inner=tool,
        saver=saver,
        kind=kind,
        window_ms=window_ms,
        query=query,
        attempts=attempts,
    )


def _canonical(messages: Any) -> bytes:
    """The model input without message ids (LangGraph gives a message a
    fresh id when it enters the state), as stable bytes."""
    def one(m: Any) -> Any:
        if isinstance(m, BaseMessage):
            return [
                m.type,
                m.content,
                getattr(m, "name", None),
                getattr(m, "tool_call_id", None),
                [[c.get("name"), c.get("args"), c.get("id")] for c in getattr(m, "tool_calls", [])],
            ]
        return m
    if isinstance(messages, dict) and "messages" in messages:
        messages = messages["messages"]
    if isinstance(messages, (list, tuple)):
        messages = [one(m) for m in messages]
    else:
        messages = one(messages)
    return json.dumps(messages, sort_keys=True, default=str).encode()


class JournaledModel(Runnable):
    """A chat model (or any runnable) whose answers are kept in the
    thread's ledger (see ``journaled``)."""

    def __init__(self, model: Runnable, saver: ActumSaver, name: str) -> None:
        self.model = model
        self.saver = saver
        self.name = name

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        thread_id, ledger, ns = _ledger_and_step(config, "model", self.name)
        serde = self.saver.serde
        asked = _canonical(input)
        digest = hashlib.sha256(asked).hexdigest()

        failed: list[BaseException] = []

        def ask(key: str, token: int, resend: bool) -> bytes:
            try:
                return _receipt(serde, self.model.invoke(input, config, **kwargs))
            except Exception as e:
                # A failed model call spends nothing: the next call with
                # this input asks again (the next attempt).
                failed.append(e)
                raise ToolFailed(f"{type(e).__name__}: {e}", retryable=True) from e

        status, key, payload, raised = self.saver._books.calls.step(
            ledger,
            _thread_bytes(thread_id),
            _step_name("m.", ns, self.name, digest),
            self.name,
            "idempotent",
            asked,
            ask,
            window_ms=_MODEL_WINDOW_MS,
        )
        if status in ("done", "replayed"):
            return _from_receipt(serde, payload)
        if failed:
            raise failed[0]
        raise RuntimeError(f"model call {key} failed: {payload.decode('utf-8', 'replace')}")

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        return await asyncio.to_thread(copy_context().run, self.invoke, input, config, **kwargs)


#: A model call is "idempotent" forever: asking again is harmless, and an
#: answer recorded is answered from the journal.
_MODEL_WINDOW_MS = 100 * 365 * 24 * 3600 * 1000


def journaled(model: Runnable, saver: ActumSaver, *, name: str = "model") -> JournaledModel:
    """Wraps a chat model (bound to its tools, if any) so its answers are
    journaled per thread, by namespace and by input (messages compared
    without their ids): a node LangGraph runs again gets the recorded
    answer, with the same tool call ids, so ``exactly_once`` tools make the
    same keys whatever the durability mode. A failed call records nothing
    (it is asked again next time)."""
    return JournaledModel(model, saver, name)
