"""actum from Python: durable agents over an embedded storage engine.

An agent is a function ``agent(ctx) -> bytes``, written as straight-line
code. Its model calls (``ctx.decide``) and tool calls (``ctx.step``) are
journaled: after a crash or a restart the function is called again from the
top, and every call it already made answers from the books, so a confirmed
tool call is never made twice and a recorded model answer is never asked
again::

    import actum

    charge = actum.Tool.idempotent("charge", window_ms=86_400_000)

    with actum.Engine.open("books") as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("refund", version="1")
        def refund(ctx):
            plan = ctx.decide("plan", ctx.input, lambda: b"refund 90 EUR")
            return ctx.step("pay", charge, plan,
                            lambda call: b"charge " + call.idempotency_key.encode())

        runtime.start("refund", "refund-42", b"90 EUR")
        runtime.drain()
        assert runtime.output("refund-42").startswith(b"charge ")

An ``async def`` agent awaits the same calls, so its event loop goes on
while the engine works: ``await ctx.adecide(...)``, ``await ctx.astep(...)``,
and an ``a`` in front of every other ``ctx`` call. See docs/PYTHON.md.
"""

import asyncio
import threading

from . import _actum
from ._actum import *  # noqa: F401,F403  (the classes and the engine's errors)
from ._actum import (
    ENGINE_ERRORS,
    ActumError,
    Approval,
    Call,
    ChildOutput,
    Ctx,
    Engine,
    EngineClosed,
    EngineForked,
    Runtime,
    Started,
    StepFailed,
    Stopped,
    Tool,
    UndoCall,
    Usage,
    Worked,
)


class ToolFailed(Exception):
    """Raised by a tool function: the request failed and had no effect.

    ``retryable=True`` lets the step try again under a new key (up to the
    tool's ``attempts``, after its backoff); otherwise the step fails for
    good and ``ctx.step`` raises ``StepFailed`` in the agent.
    """

    def __init__(self, reason: str, retryable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


class OutcomeUnknown(Exception):
    """Raised by a tool function: nobody knows whether the request took
    effect (a timeout after sending, a lost connection).

    The tool's class decides what follows: an idempotent tool is sent the
    same key again inside its window, a queryable tool is asked, and a
    not-idempotent tool's run is paused for a person to reconcile.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _run_awaitable(awaitable):
    """Runs an awaitable (what an ``async def`` agent, model, act, query or
    undo returned) to completion on this thread, with an event loop of its
    own, and returns its result; if this thread already runs a loop, on a
    thread of its own, waited for. The runtime calls it; it is not API."""

    async def wait():
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    done = {}

    def run():
        try:
            done["value"] = asyncio.run(wait())
        except BaseException as e:  # carried to the caller, whatever it is
            done["error"] = e

    thread = threading.Thread(target=run, name="actum-awaitable")
    thread.start()
    thread.join()
    if "error" in done:
        raise done["error"]
    return done["value"]


async def _ctx_call(call):
    """What ``await ctx.adecide(...)`` (and every other ``ctx.a...`` call)
    awaits. The call claims the ctx here, on the event loop's thread, when
    first awaited, and lets go of it here, when this task resumes: of two
    calls racing each other, the one awaited first is made and the other
    raises ``ActumError``, whatever the engine's speed. Between the two, the
    call is sent and its answer waited for on a thread of asyncio's, so the
    loop goes on meanwhile. A call whose task is cancelled before that
    thread started is never sent; one already sent is answered on its
    thread (the run's journal keeps the answer). The ctx makes it; it is
    not API."""
    call.claim()
    try:
        return await asyncio.to_thread(call.answer)
    finally:
        call.finish()


__all__ = [
    "ActumError",
    "Approval",
    "Call",
    "ChildOutput",
    "Ctx",
    "ENGINE_ERRORS",
    "Engine",
    "EngineClosed",
    "EngineForked",
    "OutcomeUnknown",
    "Runtime",
    "Started",
    "StepFailed",
    "Stopped",
    "Tool",
    "ToolFailed",
    "UndoCall",
    "Usage",
    "Worked",
    *_actum.ENGINE_ERRORS,
]
