"""Budgets from Python: a model call's usage is journaled and charged, and a
run whose budget is spent is paused until an operator raises it."""

import pytest

import actum


def test_a_run_whose_budget_is_spent_is_paused_and_resumes_once_raised(tmp_path):
    asked = []

    def model(cost):
        def call():
            asked.append(cost)
            return b"answer %d" % cost, actum.Usage(tokens_in=100, tokens_out=10, cost_micros=cost)

        return call

    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("research")
        def research(ctx):
            first = ctx.decide_with_usage("plan", ctx.input, model(600))
            second = ctx.decide_with_usage("search", first, model(700))
            return second

        runtime.start("research", "r1", b"q")
        engine.set_budget("r1", cost_micros=1_000, by="ops", reason="pilot")
        [worked] = runtime.drain()
        # The first call fits; it spends 600 of 1,000. The second is let in
        # (nothing held before it) and spends 700: 1,300. The agent returns;
        # a run past its budget still completes what it already asked.
        assert worked.outcome == "completed", worked
        book = engine.budget("r1")
        assert book["limits"]["cost_micros"] == 1_000
        assert book["spent"] == {
            "tokens_in": 200,
            "tokens_out": 20,
            "cost_micros": 1_300,
            "tool_calls": 0,
        }

        runtime.start("research", "r2", b"q")
        engine.set_budget("r2", cost_micros=500, by="ops")
        [worked] = runtime.drain()
        # 600 spent of 500: the next call finds no room and the run is paused.
        assert (worked.outcome, engine.state("r2")) == ("paused", "paused")
        assert "budget" in worked.detail
        assert engine.budget("r2")["spent"]["cost_micros"] == 600
        assert asked == [600, 700, 600]

        # The operator raises it and resumes: the first answer comes from the
        # books, only the second call is new.
        engine.set_budget("r2", cost_micros=5_000, by="ops", reason="approved")
        assert engine.operate("r2", "resume", "ops", "budget raised") == "running"
        [worked] = runtime.drain()
        assert worked.outcome == "completed"
        assert runtime.output("r2") == b"answer 700"
        assert asked == [600, 700, 600, 700]
        assert engine.budget("r2")["spent"]["cost_micros"] == 1_300
        assert any("budget" in why for what, why in engine.audit("r2"))


def test_a_decision_hold_stops_before_the_call_that_would_pass_the_limit(tmp_path):
    asked = []
    with actum.Engine.open(tmp_path) as engine:
        hold = actum.Usage(cost_micros=400)
        runtime = actum.Runtime(engine, decision_hold=hold)

        @runtime.agent("a")
        def a(ctx):
            for i in range(3):
                ctx.decide_with_usage(
                    "ask %d" % i,
                    b"",
                    lambda: asked.append(1) or (b"x", actum.Usage(cost_micros=300)),
                )

        runtime.start("a", "a1", b"")
        engine.set_budget("a1", cost_micros=700)
        [worked] = runtime.drain()
        # 300 spent, then 300 + 400 held fits 700; 600 + 400 would not.
        assert worked.outcome == "paused"
        assert len(asked) == 2
        assert engine.budget("a1")["spent"]["cost_micros"] == 600


def test_usage_is_checked_and_a_plain_decide_charges_nothing(tmp_path):
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("bad")
        def bad(ctx):
            with pytest.raises(TypeError, match="pair"):
                ctx.decide_with_usage("x", b"", lambda: b"no usage")
            with pytest.raises(TypeError, match="pair"):
                ctx.decide_with_usage("x", b"", lambda: (b"out", {"tokens_in": 1}))
            return ctx.decide("x", b"", lambda: b"plain")

        runtime.start("bad", "b", b"")
        engine.set_budget("b", tokens_in=10)
        assert [w.outcome for w in runtime.drain()] == ["completed"]
        assert engine.budget("b")["spent"]["tokens_in"] == 0
        with pytest.raises(ValueError):
            engine.operate("b", "explode")
        with pytest.raises(actum.NotFound):
            engine.set_budget("nobody", tool_calls=1)


def test_tool_calls_count_against_the_budget(tmp_path):
    sent = []
    tool = actum.Tool.idempotent("search", window_ms=60_000)
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("s")
        def s(ctx):
            for i in range(3):
                ctx.step("search-%d" % i, tool, b"q", lambda call: sent.append(call.key) or b"hit")

        runtime.start("s", "s1", b"")
        engine.set_budget("s1", tool_calls=2)
        [worked] = runtime.drain()
        assert worked.outcome == "paused"
        assert sent == ["s1/search-0/1", "s1/search-1/1"]
        assert engine.budget("s1")["spent"]["tool_calls"] == 2


def test_a_tool_that_holds_money_is_not_called_past_the_budget(tmp_path):
    sent = []
    pay = actum.Tool.idempotent("pay", window_ms=60_000).hold(cost_micros=400)
    assert pay.held == {"tokens_in": 0, "tokens_out": 0, "cost_micros": 400, "tool_calls": 1}
    # The builder returns a new tool; the first keeps its default hold.
    plain = actum.Tool.idempotent("pay", window_ms=60_000)
    assert plain.held["cost_micros"] == 0
    with pytest.raises(TypeError):
        plain.hold(400)  # keyword-only
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("p")
        def p(ctx):
            for i in range(3):
                ctx.step("pay-%d" % i, pay, b"10", lambda call: sent.append(call.key) or b"ok")

        runtime.start("p", "p1", b"")
        engine.set_budget("p1", cost_micros=1_000)
        [worked] = runtime.drain()
        # Two calls of 400 fit in 1,000; the third would hold 1,200.
        assert worked.outcome == "paused", worked
        assert sent == ["p1/pay-0/1", "p1/pay-1/1"]
        book = engine.budget("p1")
        assert book["spent"]["cost_micros"] == 800
        assert book["spent"]["tool_calls"] == 2

        # Without the hold the same budget would let all three through.
        engine.set_budget("p1", cost_micros=5_000, by="ops", reason="raised")
        assert engine.operate("p1", "resume", "ops", "raised") == "running"
        [worked] = runtime.drain()
        assert worked.outcome == "completed"
        assert sent == ["p1/pay-0/1", "p1/pay-1/1", "p1/pay-2/1"]
        assert engine.budget("p1")["spent"]["cost_micros"] == 1_200
