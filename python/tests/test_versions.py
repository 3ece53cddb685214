"""Agent versions from Python: a run keeps the version it started with, and a
new version registered as compatible resumes the runs of an older one."""

import pytest

import actum


def test_a_compatible_version_resumes_the_runs_of_an_older_one(tmp_path):
    asked = []

    def model():
        asked.append(1)
        return b"plan"

    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("refund", version="1")
        def v1(ctx):
            plan = ctx.decide("plan", ctx.input, model)
            ctx.signal("go")
            return b"v1 " + plan

        runtime.start("refund", "old", b"90")
        assert [w.outcome for w in runtime.drain()] == ["parked"]

    # A new deploy: only version 2 is served, compatible with 1.
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("refund", version="2", compatible=["1"])
        def v2(ctx):
            plan = ctx.decide("plan", ctx.input, model)
            ctx.signal("go")
            return b"v2 " + plan

        engine.signal("old", "go", b"")
        started = runtime.start("refund", "new", b"91")
        assert started.agent == "refund@2"
        outcomes = {w.run_id: w.outcome for w in runtime.drain()}
        assert outcomes == {"old": "completed", "new": "parked"}
        # The old run kept its version and its recorded answer.
        assert runtime.output("old") == b"v2 plan"
        assert asked == [1, 1]  # once for "old" (before the deploy), once for "new"
        assert any("refund@1" in what for what, _ in engine.audit("old"))


def test_without_compatible_an_old_run_is_not_served(tmp_path):
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)
        runtime.register("k", "1", lambda ctx: ctx.signal("go"))
        runtime.start("k", "r", b"")
        runtime.drain()
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)
        runtime.register_compatible("k", "3", [], lambda ctx: b"v3")
        engine.signal("r", "go", b"")
        assert [w.outcome for w in runtime.drain()] == []
        assert engine.state("r") != "completed"
        # Compatible names are checked as versions are.
        with pytest.raises(actum.InvalidCommand):
            runtime.register("k", "4", lambda ctx: b"", compatible=["3"])
        with pytest.raises(TypeError, match="list of versions"):
            runtime.register("k", "5", lambda ctx: b"", compatible="3")
