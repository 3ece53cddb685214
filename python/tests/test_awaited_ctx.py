"""Awaited ctx calls: an async def agent writes `await ctx.adecide(...)`
(and every other `ctx.a...` call); the engine works off the event loop's
thread, the run resumes from its journal as with the synchronous calls, and
calls racing each other are refused, never reordered."""

import asyncio
import concurrent.futures
import threading

import pytest

import actum

IDEM = dict(window_ms=86_400_000)
CHARGE = actum.Tool.idempotent("charge", **IDEM)
UNCHARGE = actum.Tool.idempotent("charge.back", **IDEM)
SCREEN = actum.Tool.idempotent("screen", **IDEM)


def every_call(runtime, seen):
    """An agent that awaits every ctx call; `seen` logs each model and tool
    function it runs, so a repeated one shows."""

    @runtime.agent("kid")
    async def kid(ctx):
        return ctx.input.upper()

    @runtime.agent("all")
    async def agent(ctx):
        async def plan_model():
            await asyncio.sleep(0)
            seen.append("plan")
            return b"plan"

        def price_model():
            seen.append("price")
            return b"90", actum.Usage(tokens_in=3, tokens_out=2, cost_micros=5)

        async def charge(call):
            seen.append(call.key)
            return b"charged"

        def reserve(call):
            seen.append(call.key)
            return b"reserved"

        def send(call):
            seen.append(call.key)
            return None  # accepted: the verdict comes later

        plan = await ctx.adecide("plan", ctx.input, plan_model)
        price = await ctx.adecide_with_usage("price", plan, price_model)
        await ctx.acheckpoint(b"priced")  # durable with the charge's outcome
        receipt = await ctx.astep("charge", CHARGE, price, charge)
        assert await ctx.alast_checkpoint() == b"priced"
        held = await ctx.astep_with_undo(
            "reserve", CHARGE, b"seat", reserve, undo=(UNCHARGE, b"free seat")
        )
        approval = await ctx.aapproval("approve", receipt, "finance", 3_600_000)
        payload = await ctx.asignal("go", within_ms=3_600_000)
        assert await ctx.asleep("nap", 0) is None
        assert await ctx.asleep_until("alarm", 0) is None
        upper = await ctx.achild("ask", "kid", b"hi")
        fan = await ctx.achildren("fan", [("kid", b"x"), ("kid", b"y")])
        verdict = await ctx.astep_async("screen", SCREEN, b"acme", send, within_ms=3_600_000)
        parts = [plan, price, receipt, held, approval.status.encode(), approval.approver.encode()]
        parts += [payload, upper, *(child.output for child in fan), verdict]
        return b" ".join(parts)


def test_an_async_agent_awaits_every_ctx_call_and_resumes_across_restarts(tmp_path):
    seen = []
    books = tmp_path / "books"

    def drive(outside=None):
        # A restart before each drive: a new engine and runtime over the books.
        with actum.Engine.open(books) as engine:
            runtime = actum.Runtime(engine)
            every_call(runtime, seen)
            if outside is None:
                runtime.start("all", "r", b"refund")
                engine.set_budget("r", cost_micros=1_000, by="test")
            else:
                outside(engine)
            worked = runtime.drain()
            return [w.outcome for w in worked], runtime.output("r"), engine.budget("r")

    outcomes, _, book = drive()
    assert outcomes == ["parked"]
    assert seen == ["plan", "price", "r/charge/1", "r/reserve/1"]
    assert book["spent"]["cost_micros"] == 5

    def approve(engine):
        engine.decide_approval("r", "approve", b"charged", "ann", "finance")

    assert drive(approve)[0] == ["parked"]  # now at the signal
    # Resumed twice from the top: no model asked again, no tool called again.
    assert seen == ["plan", "price", "r/charge/1", "r/reserve/1"]

    outcomes, _, _ = drive(lambda e: e.signal("r", "go", b"paid"))
    # The timers, the child and the children, then parked on the reply.
    assert outcomes[-1] == "parked"
    assert seen == ["plan", "price", "r/charge/1", "r/reserve/1", "r/screen/1"]

    outcomes, output, book = drive(lambda e: e.deliver_reply("r/screen/1", b"clear"))
    assert outcomes == ["completed"]
    assert output == b"plan 90 charged reserved approved ann paid HI X Y clear"
    assert seen == ["plan", "price", "r/charge/1", "r/reserve/1", "r/screen/1"]
    assert book["spent"]["cost_micros"] == 5  # the recorded answer was not charged again


@pytest.mark.parametrize("call", ["adecide", "astep"])
def test_the_event_loop_goes_on_while_an_awaited_call_is_in_flight(tmp_path, call):
    """The model (or act) blocks until another task of the agent's loop sees
    it started and lets it go: that task can only run if the awaited call
    left the loop, and the GIL, free. A blocking call would time out."""
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("a")
        async def agent(ctx):
            started, go = threading.Event(), threading.Event()

            def blocking(*_call):
                started.set()
                if not go.wait(timeout=20):
                    raise RuntimeError("the agent's event loop was blocked")
                return b"answer"

            async def other_task():
                for _ in range(20_000):
                    if started.is_set():
                        go.set()
                        return b"ran meanwhile"
                    await asyncio.sleep(0.001)
                return b"never saw the call start"

            other = asyncio.create_task(other_task())
            if call == "adecide":
                answer = await ctx.adecide("ask", b"", blocking)
            else:
                answer = await ctx.astep("do", CHARGE, b"", blocking)
            return answer + b", " + await other

        runtime.start("a", "a1", b"")
        [worked] = runtime.drain()
        assert worked.outcome == "completed", failure(engine, "a1")
        assert runtime.output("a1") == b"answer, ran meanwhile"


def test_racing_ctx_calls_are_refused_and_the_one_awaited_first_is_made(tmp_path):
    asked = []
    refused = []

    def model(name):
        def answer():
            asked.append(name)
            return name.encode()

        return answer

    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("race")
        async def race(ctx):
            # Two awaited calls at once: the first task's call is made, the
            # second raises, whatever the engine's speed.
            one, two = await asyncio.gather(
                ctx.adecide("one", b"", model("one")),
                ctx.adecide("two", b"", model("two")),
                return_exceptions=True,
            )
            refused.append(two)

            # A synchronous call from another task while an awaited one is
            # in flight: refused too.
            started, go = threading.Event(), threading.Event()

            def slow():
                started.set()
                go.wait(timeout=20)
                return b"slow"

            async def meddle():
                while not started.is_set():
                    await asyncio.sleep(0.001)
                try:
                    ctx.checkpoint(b"from the side")
                except actum.ActumError as e:
                    refused.append(e)
                go.set()

            meddler = asyncio.create_task(meddle())
            three = await ctx.adecide("three", b"", slow)
            await meddler

            # A model that calls its own ctx: refused, not a deadlock.
            try:
                ctx.decide("outer", b"", lambda: ctx.decide("inner", b"", model("inner")))
            except actum.ActumError as e:
                refused.append(e)
            # The refused calls left no trace: the next call is answered.
            four = await ctx.adecide("four", b"", model("four"))
            return b" ".join([one, three, four])

        runtime.start("race", "r1", b"")
        [worked] = runtime.drain()
        assert worked.outcome == "completed", failure(engine, "r1")
        assert runtime.output("r1") == b"one slow four"
        assert asked == ["one", "four"]
        assert len(refused) == 3
        for e in refused:
            assert type(e) is actum.ActumError
            assert "while another is in flight" in str(e)
            assert "r1" in str(e)


def test_a_call_cancelled_before_it_was_sent_is_not_made_and_frees_the_ctx(tmp_path):
    asked = []
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("c")
        async def agent(ctx):
            loop = asyncio.get_running_loop()
            loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
            hold = threading.Event()
            busy = loop.run_in_executor(None, hold.wait, 20)  # the executor's one thread
            task = asyncio.create_task(ctx.adecide("never", b"", lambda: asked.append(1)))
            await asyncio.sleep(0)  # the call claims the ctx, queued behind `busy`
            with pytest.raises(actum.ActumError, match="in flight"):
                ctx.checkpoint(b"meanwhile")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            hold.set()
            await busy
            return await ctx.adecide("after", b"", lambda: b"made")

        runtime.start("c", "c1", b"")
        [worked] = runtime.drain()
        assert worked.outcome == "completed", failure(engine, "c1")
        assert runtime.output("c1") == b"made"
        assert asked == []


def test_errors_through_await_are_the_module_classes(tmp_path):
    caught = []

    def broken_model():
        raise ValueError("model down")

    def declined(call):
        raise actum.ToolFailed("card declined")

    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)
        kept = []

        @runtime.agent("e")
        async def agent(ctx):
            # A wrong argument raises where it is passed, before any await.
            for bad in (
                lambda: ctx.adecide("d", "str", lambda: b""),
                lambda: ctx.adecide("d", b"", "not callable"),
                lambda: ctx.astep("s", "not a tool", b"", lambda call: b""),
                lambda: ctx.astep_with_undo("s", CHARGE, b"", lambda call: b"", undo=CHARGE),
                lambda: ctx.achildren("c", [("kid", b"")], join="most"),
                lambda: ctx.asleep("nap", "long"),
            ):
                try:
                    bad()
                except (TypeError, ValueError) as e:
                    caught.append(type(e).__name__)
            try:
                await ctx.adecide("d", b"", broken_model)
            except ValueError as e:
                caught.append(str(e))
            try:
                await ctx.astep("pay", CHARGE, b"90", declined)
            except actum.StepFailed as e:
                caught.append((e.reason, type(e.__cause__).__name__))
            kept.append(ctx.alast_checkpoint())  # awaited after the handler returned
            return await ctx.adecide("d", b"", lambda: b"fine")

        runtime.start("e", "e1", b"")
        [worked] = runtime.drain()
        assert worked.outcome == "completed", failure(engine, "e1")
        assert runtime.output("e1") == b"fine"
        assert caught[:6] == ["TypeError"] * 4 + ["ValueError", "TypeError"]
        assert caught[6] == "model down"
        assert "card declined" in caught[7][0] and caught[7][1] == "ToolFailed"
        with pytest.raises(actum.ActumError, match="after its handler returned"):
            asyncio.run(kept[0])


def failure(engine, run):
    return " ".join(why for what, why in engine.audit(run) if "failed" in what)
