"""ctx.step_async: a tool whose answer comes later, through a webhook
(engine.deliver_reply), across a restart, and a failed reply."""

import actum

SCREEN = actum.Tool.idempotent("kyc.screen", window_ms=86_400_000)


def onboarding(runtime, outbox):
    @runtime.agent("onboard", version="1")
    def onboard(ctx):
        def send(call):
            outbox.append(call.key)
            return None  # 202 Accepted: the verdict comes later

        verdict = ctx.step_async("screen", SCREEN, ctx.input, send, within_ms=3_600_000)
        return b"verdict: " + verdict


def test_the_run_parks_until_the_reply_and_the_request_is_sent_once(tmp_path):
    outbox = []
    with actum.Engine.open(tmp_path / "books") as engine:
        runtime = actum.Runtime(engine)
        onboarding(runtime, outbox)
        runtime.start("onboard", "acme", b"acme gmbh")
        assert [w.outcome for w in runtime.drain()] == ["parked"]
        assert engine.state("acme") == "waiting_tool"
        assert outbox == ["acme/screen/1"]
        # Nothing to do until the reply: the run holds no worker.
        assert runtime.drain() == []
    # A restart between the send and the reply: the request is not sent again.
    with actum.Engine.open(tmp_path / "books") as engine:
        runtime = actum.Runtime(engine)
        onboarding(runtime, outbox)
        assert engine.deliver_reply("acme/screen/1", b"clear", sender="kyc-webhook") == "screen"
        assert [w.outcome for w in runtime.drain()] == ["completed"]
        assert runtime.output("acme") == b"verdict: clear"
    assert outbox == ["acme/screen/1"]


def test_a_reply_that_answers_at_once_and_a_failed_reply(tmp_path):
    with actum.Engine.open(tmp_path / "books") as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("quick", version="1")
        def quick(ctx):
            return ctx.step_async("screen", SCREEN, b"x", lambda call: b"clear at once")

        outbox = []
        onboarding(runtime, outbox)
        runtime.start("quick", "q-1", b"")
        runtime.start("onboard", "o-1", b"shady ltd")
        runtime.drain()
        assert runtime.output("q-1") == b"clear at once"
        engine.deliver_reply(outbox[0], failed="sanctions list hit")
        worked = runtime.drain()
        assert [(w.run_id, w.outcome) for w in worked] == [("o-1", "ended")]
        assert engine.state("o-1") == "failed"
        assert any("sanctions list hit" in why for _, why in engine.audit("o-1"))


def test_wrong_replies_are_refused(tmp_path):
    import pytest

    with actum.Engine.open(tmp_path / "books") as engine:
        with pytest.raises(ValueError, match="one of them"):
            engine.deliver_reply("a/b/1")
        with pytest.raises(ValueError, match="one of them"):
            engine.deliver_reply("a/b/1", b"x", failed="no")
        with pytest.raises(actum.ActumError):
            engine.deliver_reply("not a key", b"x")
