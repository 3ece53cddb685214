"""asyncio from Python: async def agents, models, acts, queries and undos
run to completion, and the runtime can be driven from an event loop."""

import asyncio
import threading

import pytest

import actum

IDEM = dict(window_ms=86_400_000)


def test_an_async_agent_with_async_model_and_act(tmp_path):
    seen = []
    charge = actum.Tool.idempotent("charge", **IDEM)

    async def model():
        await asyncio.sleep(0)
        seen.append("model")
        return b"plan"

    async def act(call):
        await asyncio.sleep(0)
        seen.append(call.key)
        return b"charged"

    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("a")
        async def agent(ctx):
            await asyncio.sleep(0)
            plan = ctx.decide("plan", ctx.input, model)  # the synchronous calls work here too
            receipt = ctx.step("charge", charge, plan, act)
            return plan + b" " + receipt

        runtime.start("a", "a1", b"in")
        [worked] = runtime.drain()
        assert worked.outcome == "completed", failure(engine, "a1")
        assert runtime.output("a1") == b"plan charged"
        assert seen == ["model", "a1/charge/1"]


def test_an_async_agent_that_waits_resumes_and_one_that_raises_fails(tmp_path):
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("wait")
        async def wait(ctx):
            payload = ctx.signal("go")
            return b"got " + payload

        @runtime.agent("boom")
        async def boom(ctx):
            await asyncio.sleep(0)
            raise ValueError("async nonsense")

        runtime.start("wait", "w", b"")
        runtime.start("boom", "b", b"")
        outcomes = {w.run_id: w.outcome for w in runtime.drain()}
        assert outcomes == {"w": "parked", "b": "ended"}
        assert "ValueError: async nonsense" in failure(engine, "b")
        engine.signal("w", "go", b"x")
        assert [w.outcome for w in runtime.drain()] == ["completed"]
        assert runtime.output("w") == b"got x"


def test_async_query_and_undo(tmp_path):
    undone = []
    bank = {}

    async def query(call):
        return bank.get(call.idempotency_key)

    async def transfer(call):
        bank[call.idempotency_key] = b"moved"
        raise actum.OutcomeUnknown("timeout after sending")

    async def undo(call):
        undone.append(call.receipt)

    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)
        move = actum.Tool.queryable("bank", query=query)
        back = actum.Tool.idempotent("bank.back", **IDEM)
        runtime.register_undo("bank.back", undo)

        @runtime.agent("t")
        async def t(ctx):
            ctx.step_with_undo("move", move, b"90", transfer, undo=(back, b"90 back"))
            raise RuntimeError("later trouble")

        runtime.start("t", "t1", b"")
        [worked] = runtime.drain()
        assert (worked.outcome, worked.detail) == ("ended", "failed")
        # The ambiguous act was asked about (async query: "moved"), then undone.
        assert undone == [b"moved"]


def test_the_runtime_driven_from_asyncio(tmp_path):
    async def main(engine, runtime):
        runtime.start("k", "k1", b"one")
        runtime.start("k", "k2", b"two")
        ticks = []

        async def ticker():
            for _ in range(3):
                ticks.append(1)
                await asyncio.sleep(0)

        worked, _ = await asyncio.gather(runtime.adrain(), ticker())
        assert sorted(w.run_id for w in worked) == ["k1", "k2"]
        assert ticks == [1, 1, 1]
        runtime.start("k", "k3", b"three")
        one = await runtime.awork_once()
        assert (one.run_id, one.outcome) == ("k3", "completed")
        assert await runtime.awork_once() is None

        # run() on a thread of asyncio's, until shutdown.
        runtime.start("k", "k4", b"four")
        serving = asyncio.ensure_future(runtime.arun(threads=1))
        while runtime.output("k4") is None:
            await asyncio.sleep(0.01)
        runtime.shutdown()
        await serving

    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("k")
        async def k(ctx):
            return ctx.input.upper()

        asyncio.run(main(engine, runtime))
        assert [runtime.output(f"k{i}") for i in range(1, 5)] == [b"ONE", b"TWO", b"THREE", b"FOUR"]


def test_work_once_called_inside_a_running_loop_still_completes_async_functions(tmp_path):
    """work_once straight from a coroutine (blocking the loop: not advised)
    must not fail with "asyncio.run() cannot be called from a running loop":
    the model runs on a thread of its own."""

    async def model():
        return b"from " + threading.current_thread().name.encode()

    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)
        runtime.register("m", "1", lambda ctx: ctx.decide("ask", b"", model))
        runtime.start("m", "m1", b"")

        async def main():
            return runtime.work_once()

        worked = asyncio.run(main())
        assert worked.outcome == "completed", failure(engine, "m1")
        assert runtime.output("m1") == b"from actum-awaitable"


def test_a_closed_runtime_raises_before_anything_is_awaited(tmp_path):
    engine = actum.Engine.open(tmp_path)
    runtime = actum.Runtime(engine)
    engine.close()
    with pytest.raises(actum.EngineClosed):
        runtime.adrain()


def failure(engine, run):
    return " ".join(why for what, why in engine.audit(run) if "failed" in what)
