"""`actum.Engine.open("postgres://...")`: the books in a PostgreSQL database
that several engines (several processes, several hosts) open at once.

The tests need a server: `scripts/postgres.sh` starts one and sets
ACTUM_PG_URL to it (and ACTUM_PG_REQUIRED=1). Without ACTUM_PG_URL they skip,
unless ACTUM_PG_REQUIRED is set: then they fail. Each test makes a database
of its own on the server."""

from __future__ import annotations

import os
import time

import pytest

import actum
from actum._actum import scratch_database


@pytest.fixture
def url(request):
    """A new, empty database on the server ACTUM_PG_URL names."""
    server = os.environ.get("ACTUM_PG_URL")
    if not server:
        if os.environ.get("ACTUM_PG_REQUIRED"):
            pytest.fail("ACTUM_PG_REQUIRED is set but ACTUM_PG_URL is not: no server to test on")
        pytest.skip("no PostgreSQL server: set ACTUM_PG_URL (scripts/postgres.sh does)")
    return scratch_database(server, "py_" + request.node.name[5:25].lower())


def test_a_run_started_on_one_engine_completes_on_another(url):
    charged = []
    charge = actum.Tool.idempotent("charge", window_ms=86_400_000)

    def act(call):
        charged.append(call.idempotency_key)
        return b"charged " + call.idempotency_key.encode()

    # Two engines on one database, as two processes would open it: the web
    # process starts runs, the worker process drives them.
    with actum.Engine.open(url) as web, actum.Engine.open(url) as worker:
        assert web.path == url and "postgres://" in repr(web)
        front = actum.Runtime(web, worker="web")
        back = actum.Runtime(worker, worker="worker")
        for runtime in (front, back):

            @runtime.agent("refund", version="1")
            def refund(ctx):
                plan = ctx.decide("plan", ctx.input, lambda: b"refund " + ctx.input)
                return ctx.step("charge", charge, plan, act)

        started = front.start("refund", "refund-1", b"90 EUR")
        assert started.created
        assert worker.state("refund-1") == "pending", "the other engine sees the run at once"
        worked = back.drain()
        assert [(w.run_id, w.outcome) for w in worked] == [("refund-1", "completed")]
        assert web.state("refund-1") == "completed"
        assert front.output("refund-1") == b"charged refund-1/charge/1"
        assert charged == ["refund-1/charge/1"]
        assert [what for what, _ in web.audit("refund-1")] == [
            what for what, _ in worker.audit("refund-1")
        ]
        # Nothing is left for the web process's runtime to do.
        assert front.drain() == []


def test_a_step_acts_once_when_another_engine_drives_the_run_again(url):
    asked, charged, mailed = [], [], []
    charge = actum.Tool.idempotent("charge", window_ms=86_400_000)
    mail = actum.Tool.idempotent("mail", window_ms=86_400_000)

    def act(call):
        charged.append(call.idempotency_key)
        return b"charged"

    def send(call):
        mailed.append(call.idempotency_key)
        return b" and mailed"

    def pay(runtime, stop):
        def handler(ctx):
            plan = ctx.decide("plan", ctx.input, lambda: asked.append(1) or b"plan")
            receipt = ctx.step("charge", charge, plan, act)
            if stop:
                # This process goes away right after the charge is
                # confirmed: the runtime stops the handler at its next call.
                runtime.shutdown()
            return receipt + ctx.step("mail", mail, receipt, send)

        return handler

    first = actum.Engine.open(url)
    second = actum.Engine.open(url)
    try:
        going = actum.Runtime(first, worker="first", lease_ttl_ms=2_000)
        going.register("pay", "1", pay(going, stop=True))
        going.start("pay", "pay-1", b"90 EUR")
        assert going.work_once().outcome == "shut_down"
        assert (len(asked), charged, mailed) == (1, ["pay-1/charge/1"], [])

        # The other process, its engine open all along, drives the run on:
        # the decision and the charge answer from the books.
        taking_over = actum.Runtime(second, worker="second", lease_ttl_ms=2_000)
        taking_over.register("pay", "1", pay(taking_over, stop=False))
        deadline = time.monotonic() + 10
        outcomes = []
        while not outcomes and time.monotonic() < deadline:
            outcomes = [w.outcome for w in taking_over.drain()]
            if not outcomes:
                time.sleep(0.1)  # a lease the first runtime still held runs out
        assert outcomes == ["completed"]
        assert (len(asked), charged, mailed) == (1, ["pay-1/charge/1"], ["pay-1/mail/1"])
        assert taking_over.output("pay-1") == b"charged and mailed"
        assert first.state("pay-1") == "completed"
    finally:
        first.close()
        second.close()


def test_operator_commands_on_one_engine_reach_the_other(url):
    with actum.Engine.open(url) as one, actum.Engine.open(url) as other:
        runtime = actum.Runtime(one)
        runtime.register("k", "1", lambda ctx: b"done")
        runtime.start("k", "r-1", b"")
        assert other.operate("r-1", "pause", "ops", "looking") == "paused"
        assert one.state("r-1") == "paused"
        assert runtime.drain() == []
        other.set_budget("r-1", tool_calls=3, by="ops")
        assert one.budget("r-1")["limits"]["tool_calls"] == 3
        assert other.operate("r-1", "resume", "ops", "fine") != "paused"
        assert [w.outcome for w in runtime.drain()] == ["completed"]
        assert other.state("r-1") == "completed"


def test_the_operator_channel_is_refused_on_a_url(url):
    with pytest.raises(actum.InvalidConfig) as refused:
        actum.Engine.open(url, operator_channel=True)
    assert "operator_channel" in refused.value.reason


def test_a_server_that_is_not_there_raises_postgres():
    with pytest.raises(actum.Postgres) as failed:
        actum.Engine.open("postgres://nobody:secret@127.0.0.1:1/books")
    error = failed.value
    assert isinstance(error, actum.ActumError)
    assert error.server == "postgres://nobody@127.0.0.1:1/books", "no password in errors"
    assert "secret" not in str(error)
    assert "because: " in str(error), "the client's error says its cause"
    assert error.op
    assert error.may_have_landed is False
    # A postgresql:// URL is a URL too, not a directory named so.
    with pytest.raises(actum.Postgres):
        actum.Engine.open("postgresql://nobody@127.0.0.1:1/books")


def test_a_path_like_is_still_a_directory(tmp_path):
    # Only a str names a URL; a path-like is a directory, even one whose
    # name looks like a URL's start.
    with actum.Engine.open(tmp_path / "postgres:") as engine:
        assert engine.path.endswith("postgres:")


def test_neither_a_path_nor_a_url_is_a_type_error():
    for bad in (123, None, b"postgres://x@h/db"):
        with pytest.raises(TypeError) as refused:
            actum.Engine.open(bad)
        assert "postgres:// URL" in str(refused.value)


def test_the_scratch_helper_refuses_a_prefix_that_is_not_plain():
    with pytest.raises(ValueError):
        scratch_database("postgres://nobody@127.0.0.1:1/postgres", "x; DROP DATABASE y")


def test_the_langgraph_saver_keeps_a_thread_in_postgres(url):
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.base import empty_checkpoint

    from actum.langgraph import ActumSaver

    config = {"configurable": {"thread_id": "essay-1", "checkpoint_ns": ""}}
    with ActumSaver.from_path(url) as saver:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"n": 1}
        checkpoint["channel_versions"] = {"n": 1}
        saved = saver.put(config, checkpoint, {"step": 0}, {"n": 1})
    # Another process's saver reads the thread from the books.
    with ActumSaver.from_path(url) as saver:
        found = saver.get_tuple(saved)
        assert found is not None
        assert found.checkpoint["channel_values"] == {"n": 1}
