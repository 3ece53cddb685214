"""Bad input is a clear Python exception, never a crash: wrong types, a
closed engine, exceptions inside tools, models and undos; and the books keep
what was acknowledged before it."""

import asyncio

import pytest

import actum

IDEM = dict(window_ms=86_400_000)


def test_wrong_types_outside_a_handler_raise_type_errors(tmp_path):
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)
        runtime.register("k", "1", lambda ctx: b"")
        for call in (
            lambda: runtime.start(1, "r", b""),
            lambda: runtime.start("k", 2, b""),
            lambda: runtime.start("k", "r", "str, not bytes"),
            lambda: engine.state(42),
            lambda: engine.audit(None),
            lambda: engine.signal("r", "go", "str, not bytes"),
            lambda: engine.set_budget(42, tool_calls=1),
            lambda: engine.set_budget("r", tool_calls="many"),
            lambda: engine.operate("r", 7),
            lambda: runtime.register_undo(42, lambda call: b""),
            lambda: runtime.register_undo("t", "not callable"),
            lambda: runtime.register_tool("not a tool"),
            lambda: runtime.register_compatible("k", "2", "1", lambda ctx: b""),
            lambda: runtime.register("k", "3", lambda ctx: b"", compatible=[1]),
            lambda: actum.Runtime(engine, decision_hold=100),
            lambda: actum.Usage(tokens_in="ten"),
        ):
            with pytest.raises(TypeError):
                call()
        with pytest.raises(OverflowError):
            actum.Usage(cost_micros=-1)
        with pytest.raises(ValueError):
            engine.operate("r", "explode")
        # Nothing above started a run or registered a version.
        assert engine.state("r") is None
        assert runtime.start("k", "r", b"").agent == "k@1"


def test_wrong_types_inside_a_handler_are_raised_there(tmp_path):
    raised = []
    tool = actum.Tool.idempotent("t", **IDEM)
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)
        runtime.register("kid", "1", lambda ctx: b"")

        @runtime.agent("h")
        def h(ctx):
            for call in (
                lambda: ctx.decide("d", "str", lambda: b""),
                lambda: ctx.decide(42, b"", lambda: b""),
                lambda: ctx.decide("d", b"", "not callable"),
                lambda: ctx.decide("d", b"", lambda: "str, not bytes"),
                lambda: ctx.decide_with_usage("d", b"", lambda: b"no usage"),
                lambda: ctx.step("s", tool, "str", lambda call: b""),
                lambda: ctx.step("s", "not a tool", b"", lambda call: b""),
                lambda: ctx.step_with_undo("s", tool, b"", lambda call: b"", undo=tool),
                lambda: ctx.step_with_undo("s", tool, b"", lambda call: b"", undo=(tool, "s")),
                lambda: ctx.children("c", "not a list"),
                lambda: ctx.children("c", [("kid", "str")]),
                lambda: ctx.children("c", [("kid",)]),
                lambda: ctx.signal(42),
                lambda: ctx.sleep("nap", "long"),
            ):
                try:
                    call()
                    raised.append(None)
                except (TypeError, ValueError) as e:
                    raised.append(type(e).__name__)
            try:
                ctx.children("c", [("kid", b"")], join="most")
            except ValueError as e:
                raised.append(str(e))
            # None of it was recorded: the first model call is still position 0.
            return ctx.decide("d", b"", lambda: b"answer")

        runtime.start("h", "h1", b"")
        [worked] = runtime.drain()
        assert worked.outcome == "completed"
        expected = ["TypeError"] * 14
        expected[11] = "ValueError"  # a pair of one: a tuple of the wrong length
        assert raised == expected + ['join is "all" or "first", not "most"']
        assert runtime.output("h1") == b"answer"
        decisions = [what for what, _ in engine.audit("h1") if what.startswith("model call")]
        assert decisions == ["model call 0 recorded (input d9dba825)"]


def test_exceptions_in_a_tool_model_query_or_undo_keep_what_was_acknowledged(tmp_path):
    undone = []
    pay = actum.Tool.idempotent("pay", **IDEM)
    refund = actum.Tool.idempotent("refund", **IDEM)

    def bad_query(call):
        raise KeyError("lost the ledger")

    lookup = actum.Tool.queryable("lookup", query=bad_query)

    async def model():
        raise ValueError("rate limited")

    def unknown(call):
        raise actum.OutcomeUnknown("timeout")

    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)
        runtime.register_undo(refund, lambda call: undone.append(call.receipt) or b"refunded")

        @runtime.agent("a")
        def a(ctx):
            receipt = ctx.step_with_undo(
                "pay", pay, b"90", lambda call: b"paid", undo=(refund, b"90")
            )
            ctx.checkpoint(b"paid " + receipt)
            try:
                ctx.decide("ask", b"", model)
            except ValueError:
                pass
            try:
                ctx.step("look", lookup, b"", unknown)
            except actum.StepFailed as failed:
                assert "lost the ledger" in failed.reason
            raise OSError("disk on fire")

        runtime.start("a", "a1", b"")
        [worked] = runtime.drain()
        assert (worked.outcome, worked.detail) == ("ended", "failed")
        audit = engine.audit("a1")
        # Acknowledged: the payment (confirmed before anything went wrong),
        # then its undo, with the payment's receipt; the run's failure names
        # the exception.
        assert ("a1/pay/1 confirmed", "") in audit
        assert undone == [b"paid"]
        assert any("OSError: disk on fire" in why for _, why in audit)
        # The failed model call recorded nothing.
        assert not any(what.startswith("model call") for what, _ in audit)


def test_a_closed_engine_refuses_every_new_call(tmp_path):
    engine = actum.Engine.open(tmp_path)
    runtime = actum.Runtime(engine)
    runtime.register("k", "1", lambda ctx: ctx.signal("go"))
    runtime.start("k", "r", b"")
    runtime.drain()
    engine.close()
    tool = actum.Tool.idempotent("t", **IDEM)
    for call in (
        lambda: engine.set_budget("r", tool_calls=1),
        lambda: engine.budget("r"),
        lambda: engine.operate("r", "cancel"),
        lambda: runtime.register_undo(tool, lambda call: b""),
        lambda: runtime.register_tool(tool),
        lambda: runtime.register_compatible("k", "2", ["1"], lambda ctx: b""),
        lambda: runtime.work_once(),
        lambda: runtime.awork_once(),
        lambda: runtime.adrain(),
        lambda: runtime.arun(),
        lambda: actum.Runtime(engine),
    ):
        with pytest.raises(actum.EngineClosed):
            call()
    # Reopened, the run is where the books left it.
    with actum.Engine.open(tmp_path) as engine:
        assert engine.state("r").startswith("waiting")


def test_an_async_agent_awaiting_something_that_fails_fails_its_run(tmp_path):
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("a")
        async def a(ctx):
            await asyncio.wait_for(asyncio.sleep(10), timeout=0.01)

        runtime.start("a", "a1", b"")
        [worked] = runtime.drain()
        assert (worked.outcome, worked.detail) == ("ended", "failed")
        assert any("TimeoutError" in why for _, why in engine.audit("a1"))
