"""LangGraph's own checkpointer conformance suite, run over ActumSaver.

``langgraph-checkpoint-conformance`` detects which of the eight capabilities
a saver implements (put, put_writes, get_tuple, list, delete_thread,
delete_for_runs, copy_thread, prune) and runs its tests for each. The saver
must implement all eight and pass every test: once through its own async
methods, and once through an adapter whose async methods call the saver's
sync ones, so both halves are proven.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.spec import (
    test_copy_thread,
    test_delete_for_runs,
    test_delete_thread,
    test_get_tuple,
    test_list,
    test_prune,
    test_put,
    test_put_writes,
)

from actum.langgraph import ActumSaver


class SyncToAsync(BaseCheckpointSaver):
    """Every async method of the saver interface, answered by the wrapped
    saver's sync method on a worker thread."""

    def __init__(self, inner: BaseCheckpointSaver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    async def aget_tuple(self, config):
        return await asyncio.to_thread(self.inner.get_tuple, config)

    async def alist(self, config, *, filter=None, before=None, limit=None) -> AsyncIterator[Any]:
        found = await asyncio.to_thread(
            lambda: list(self.inner.list(config, filter=filter, before=before, limit=limit))
        )
        for item in found:
            yield item

    async def aput(self, config, checkpoint, metadata, new_versions):
        return await asyncio.to_thread(self.inner.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config, writes, task_id, task_path=""):
        await asyncio.to_thread(self.inner.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id):
        await asyncio.to_thread(self.inner.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]):
        await asyncio.to_thread(self.inner.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id, target_thread_id):
        await asyncio.to_thread(self.inner.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids, *, strategy="keep_latest"):
        await asyncio.to_thread(self.inner.prune, thread_ids, strategy=strategy)


@checkpointer_test(name="ActumSaver")
async def actum_saver():
    with tempfile.TemporaryDirectory() as path, ActumSaver.from_path(path) as saver:
        yield saver


@checkpointer_test(name="ActumSaver (sync methods)")
async def actum_saver_sync():
    with tempfile.TemporaryDirectory() as path, ActumSaver.from_path(path) as saver:
        yield SyncToAsync(saver)


def check(registered) -> None:
    report = asyncio.run(validate(registered))
    failures = {
        cap: result.failures for cap, result in report.results.items() if not result.passed
    }
    assert not failures, f"{registered.name} failed: {failures}"
    detected = {cap for cap, result in report.results.items() if result.detected}
    assert detected == {c.value for c in ALL_CAPABILITIES}, detected
    # Every test of the installed suite ran and passed, none was skipped.
    suite = [
        test_put.ALL_PUT_TESTS,
        test_put_writes.ALL_PUT_WRITES_TESTS,
        test_get_tuple.ALL_GET_TUPLE_TESTS,
        test_list.ALL_LIST_TESTS,
        test_delete_thread.ALL_DELETE_THREAD_TESTS,
        test_delete_for_runs.ALL_DELETE_FOR_RUNS_TESTS,
        test_copy_thread.ALL_COPY_THREAD_TESTS,
        test_prune.ALL_PRUNE_TESTS,
    ]
    passed = sum(r.tests_passed for r in report.results.values())
    assert passed == sum(len(tests) for tests in suite), passed


def test_actum_saver_passes_langgraph_conformance():
    check(actum_saver)


def test_actum_saver_sync_methods_pass_langgraph_conformance():
    check(actum_saver_sync)
