"""The module's own tests: agents, tools, restarts and errors from Python."""

import threading

import pytest

import actum


def idempotent(calls):
    """An idempotent tool that records each request it receives."""

    def act(call):
        calls.append((call.idempotency_key, call.token, call.resend))
        return b"charged " + call.idempotency_key.encode()

    return actum.Tool.idempotent("charge", window_ms=86_400_000), act


class Bank:
    """A queryable service: applies every request it receives, and can be
    asked whether a key was applied."""

    def __init__(self):
        self.applied = {}
        self.sent = 0

    def transfer(self, call):
        self.sent += 1
        self.applied[call.idempotency_key] = b"transfer ok"
        return b"transfer ok"

    def query(self, call):
        return self.applied.get(call.idempotency_key)


def test_an_agent_decides_steps_and_checkpoints(tmp_path):
    asked, charged, bank = [], [], Bank()
    charge, act = idempotent(charged)
    bank_tool = actum.Tool.queryable("bank", query=bank.query)
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("refund", version="1")
        def refund(ctx):
            assert ctx.run_id == "refund-1"
            plan = ctx.decide("plan", ctx.input, lambda: asked.append(1) or b"refund 90")
            receipt = ctx.step("charge", charge, plan, act)
            ctx.checkpoint(b"charged")
            moved = ctx.step("move", bank_tool, b"90 EUR", bank.transfer)
            return receipt + b" / " + moved

        started = runtime.start("refund", "refund-1", b"90 EUR")
        assert started.created and started.agent == "refund@1"
        worked = runtime.drain()
        assert [(w.run_id, w.outcome) for w in worked] == [("refund-1", "completed")]
        assert runtime.output("refund-1") == b"charged refund-1/charge/1 / transfer ok"
        assert engine.state("refund-1") == "completed"
        assert (asked, len(charged), bank.sent) == ([1], 1, 1)
        # The same start again answers the run; another input is refused.
        assert not runtime.start("refund", "refund-1", b"90 EUR").created
        with pytest.raises(actum.RunInputMismatch) as refused:
            runtime.start("refund", "refund-1", b"91 EUR")
        assert refused.value.run == "refund-1"


def test_a_restart_resumes_without_acting_or_asking_twice(tmp_path):
    asked, charged, bank = [], [], Bank()
    charge, act = idempotent(charged)
    bank_tool = actum.Tool.queryable("bank", query=bank.query)
    resumed_from = []

    def pay(runtime, stop):
        def handler(ctx):
            resumed_from.append(ctx.last_checkpoint())
            plan = ctx.decide("plan", ctx.input, lambda: asked.append(1) or b"plan")
            # Saved with the charge's outcome, in the same commit.
            ctx.checkpoint(b"planned " + plan)
            ctx.step("charge", charge, plan, act)
            if stop:
                # The process goes away right after the charge is confirmed:
                # the runtime stops the handler at its next call.
                runtime.shutdown()
            return ctx.step("move", bank_tool, b"90 EUR", bank.transfer)

        return handler

    engine = actum.Engine.open(str(tmp_path))
    runtime = actum.Runtime(engine)
    runtime.register("pay", "1", pay(runtime, stop=True))
    runtime.start("pay", "pay-1", b"90 EUR")
    worked = runtime.work_once()
    assert worked.outcome == "shut_down"
    assert (len(asked), len(charged), bank.sent) == (1, 1, 0)
    engine.close()
    assert engine.closed

    # A new process: the engine reopened on the same directory, a new
    # runtime, the same agent.
    engine = actum.Engine.open(tmp_path)
    runtime = actum.Runtime(engine)
    runtime.register("pay", "1", pay(runtime, stop=False))
    assert [w.outcome for w in runtime.drain()] == ["completed"]
    # The decision was not asked again and the charge not sent again: both
    # answered from the books; only the transfer was new work.
    assert (len(asked), len(charged), bank.sent) == (1, 1, 1)
    assert resumed_from == [None, b"planned plan"]
    assert runtime.output("pay-1") == b"transfer ok"
    engine.close()


def test_closed_engine_raises(tmp_path):
    engine = actum.Engine.open(tmp_path)
    runtime = actum.Runtime(engine)
    engine.close()
    engine.close()  # twice is fine
    with pytest.raises(actum.EngineClosed):
        engine.state("r")
    with pytest.raises(actum.EngineClosed):
        runtime.start("k", "r", b"")
    with pytest.raises(actum.EngineClosed):
        actum.Runtime(engine)
    assert issubclass(actum.EngineClosed, actum.ActumError)


def test_one_process_per_directory(tmp_path):
    with actum.Engine.open(tmp_path):
        with pytest.raises(actum.Locked) as locked:
            actum.Engine.open(tmp_path)
        assert str(tmp_path) in locked.value.dir


def test_bad_input_is_a_clear_exception(tmp_path):
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)
        runtime.register("k", "1", lambda ctx: b"")
        with pytest.raises(TypeError):
            runtime.start("k", "r1", "a str, not bytes")
        with pytest.raises(TypeError):
            runtime.register("k", "2", "not callable")
        with pytest.raises(actum.InvalidCommand):
            runtime.register("k", "1", lambda ctx: b"")  # twice
        with pytest.raises(actum.InvalidName) as bad:
            runtime.start("k", "a/b", b"")
        assert bad.value.name == "a/b" and bad.value.what
        with pytest.raises(actum.NotFound):
            runtime.start("nobody", "r2", b"")


def test_wrong_types_inside_a_handler_fail_the_run_not_the_interpreter(tmp_path):
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("typo")
        def typo(ctx):
            ctx.checkpoint("a str")  # TypeError, raised in the handler

        @runtime.agent("returns-str")
        def returns_str(ctx):
            return "not bytes"

        runtime.start("typo", "t1", b"")
        runtime.start("returns-str", "t2", b"")
        outcomes = {w.run_id: (w.outcome, w.detail) for w in runtime.drain()}
        assert outcomes == {"t1": ("ended", "failed"), "t2": ("ended", "failed")}
        assert "TypeError" in failure(engine, "t1")
        assert "returned a str, not bytes" in failure(engine, "t2")


def failure(engine, run):
    """Why the run failed, from its journal."""
    return " ".join(why for what, why in engine.audit(run) if "failed" in what)


def test_an_exception_in_a_handler_fails_the_run_with_its_text(tmp_path):
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("boom")
        def boom(ctx):
            raise ValueError("the model said nonsense")

        runtime.start("boom", "b1", b"")
        [worked] = runtime.drain()
        assert (worked.outcome, worked.detail) == ("ended", "failed")
        assert "ValueError: the model said nonsense" in failure(engine, "b1")
        assert runtime.output("b1") is None


def test_tool_failures_reach_the_agent(tmp_path):
    tries = []

    def flaky(call):
        tries.append(call.attempt)
        if call.attempt < 3:
            raise actum.ToolFailed("busy", retryable=True)
        return b"done on " + str(call.attempt).encode()

    def broken(call):
        raise RuntimeError("connection refused")

    flaky_tool = actum.Tool.idempotent("flaky", window_ms=60_000, attempts=3, backoff_ms=(0, 0))
    broken_tool = actum.Tool.not_idempotent("mail")
    handled = []
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("tools")
        def tools(ctx):
            out = ctx.step("flaky", flaky_tool, b"x", flaky)
            try:
                ctx.step("mail", broken_tool, b"hello", broken)
            except actum.StepFailed as failed:
                handled.append((failed.reason, type(failed.__cause__).__name__))
            ctx.step("mail-again", broken_tool, b"hello", broken)
            return out

        runtime.start("tools", "t", b"")
        [worked] = runtime.drain()
        assert (worked.outcome, worked.detail) == ("ended", "failed")
        assert tries == [1, 2, 3]
        [(reason, cause)] = handled
        assert reason.endswith("RuntimeError: connection refused") and cause == "RuntimeError"
        assert "connection refused" in failure(engine, "t")


def test_an_unknown_outcome_of_a_not_idempotent_tool_pauses_the_run(tmp_path):
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        def timeout(call):
            raise actum.OutcomeUnknown("timed out after sending")

        mail = actum.Tool.not_idempotent("mail")
        runtime.register("m", "1", lambda ctx: ctx.step("send", mail, b"hi", timeout))
        runtime.start("m", "m1", b"")
        [worked] = runtime.drain()
        assert worked.outcome == "paused"
        assert "timed out after sending" in worked.detail
        assert engine.state("m1") == "paused"


def test_a_model_exception_is_raised_in_the_agent(tmp_path):
    def model():
        raise ValueError("rate limited")

    caught = []
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("m")
        def m(ctx):
            try:
                return ctx.decide("ask", b"q", model)
            except ValueError as e:
                caught.append(str(e))
                raise

        runtime.start("m", "m1", b"")
        [worked] = runtime.drain()
        assert caught == ["rate limited"]
        assert (worked.outcome, worked.detail) == ("ended", "failed")
        assert "ValueError: rate limited" in failure(engine, "m1")


def test_a_model_call_that_raised_may_be_asked_again(tmp_path):
    tries = []

    def model():
        tries.append(1)
        if len(tries) == 1:
            raise ValueError("rate limited")
        return b"answer"

    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("m")
        def m(ctx):
            try:
                return ctx.decide("ask", b"q", model)
            except ValueError:
                return ctx.decide("ask", b"q", model)

        runtime.start("m", "m2", b"")
        [worked] = runtime.drain()
        assert worked.outcome == "completed", worked
        assert runtime.output("m2") == b"answer"
        assert len(tries) == 2


def test_signals_and_approvals_park_the_run(tmp_path):
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("wait")
        def wait(ctx):
            approval = ctx.approval("approve", b"pay 90", "finance", 3_600_000)
            assert approval.approved and approval.approver == "ann"
            payload = ctx.signal("paid", within_ms=3_600_000)
            return payload

        runtime.start("wait", "w1", b"")
        [worked] = runtime.drain()
        assert (worked.outcome, worked.detail) == ("parked", "approve")
        assert engine.decide_approval("w1", "approve", b"pay 90", "ann", "finance", note="ok")
        [worked] = runtime.drain()
        assert (worked.outcome, worked.detail) == ("parked", "paid")
        engine.signal("w1", "paid", b"psp ref 41")
        [worked] = runtime.drain()
        assert worked.outcome == "completed"
        assert runtime.output("w1") == b"psp ref 41"


def test_a_ctx_kept_past_its_handler_raises(tmp_path):
    kept = []
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)
        runtime.register("k", "1", lambda ctx: kept.append(ctx) or b"")
        runtime.start("k", "k1", b"")
        runtime.drain()
        with pytest.raises(actum.ActumError, match="after its handler returned"):
            kept[0].checkpoint(b"late")


def test_run_serves_on_threads_until_shutdown(tmp_path):
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)
        done = threading.Event()

        @runtime.agent("k")
        def k(ctx):
            if ctx.run_id == "k9":
                done.set()
            return ctx.input

        for i in range(10):
            runtime.start("k", f"k{i}", str(i).encode())
        stopper = threading.Thread(target=lambda: (done.wait(10), runtime.shutdown()))
        stopper.start()
        runtime.run(threads=2)
        stopper.join()
        runtime.restart()
        runtime.drain()
        assert [runtime.output(f"k{i}") for i in range(10)] == [str(i).encode() for i in range(10)]
        assert runtime.stats()["completed"] == 10


def test_error_classes_carry_their_fields(tmp_path):
    assert len(actum.ENGINE_ERRORS) >= 49
    for name in actum.ENGINE_ERRORS:
        assert issubclass(getattr(actum, name), actum.ActumError)
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)
        runtime.register("k", "1", lambda ctx: b"")
        runtime.start("k", "r", b"a")
        with pytest.raises(actum.RunInputMismatch) as e:
            runtime.start("k", "r", b"b")
        assert e.value.run == "r"
        assert e.value.recorded != e.value.presented
        assert "r" in str(e.value)


def test_the_stubs_name_every_engine_error():
    import pathlib
    import re

    stubs = pathlib.Path(actum.__file__).with_name("__init__.pyi").read_text()
    stubbed = re.findall(r"^class (\w+)\(ActumError\):", stubs, re.M)
    assert sorted(set(stubbed) - {"EngineClosed", "StepFailed"}) == sorted(actum.ENGINE_ERRORS)


def test_a_child_run_and_a_timer(tmp_path):
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("kid")
        def kid(ctx):
            return ctx.input.upper()

        @runtime.agent("parent")
        def parent(ctx):
            ctx.sleep("nap", 0)
            return ctx.child("ask", "kid", b"hello")

        runtime.start("parent", "p1", b"")
        outcomes = [w.outcome for w in runtime.drain()]
        assert outcomes[-1] == "completed", outcomes
        assert runtime.output("p1") == b"HELLO"
        assert runtime.output("p1:ask") == b"HELLO"
