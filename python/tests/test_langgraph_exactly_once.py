"""exactly_once tools and journaled models, called as LangGraph calls them."""

from __future__ import annotations

from typing import Annotated

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import InjectedToolArg, tool

import actum
from actum.langgraph import ActumSaver, UnknownEffect, current_call, exactly_once, journaled


def config(thread="t-1", ns="tools:5f0e-task-id"):
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}


def call(call_id="call-1", **args):
    return {"name": "pay", "args": args or {"amount": 5}, "id": call_id, "type": "tool_call"}


@pytest.fixture
def saver(tmp_path):
    with ActumSaver.from_path(tmp_path / "books") as saver:
        yield saver


def test_a_tool_call_runs_once_per_thread_and_call_id(saver):
    seen = []

    @tool
    def pay(amount: int, idempotency_key: Annotated[str, InjectedToolArg]) -> str:
        """Pay."""
        seen.append((amount, idempotency_key, current_call().token))
        return f"paid {amount}"

    paying = exactly_once(pay, saver, kind="idempotent", window_ms=60_000)
    first = paying.invoke(call(), config())
    # Again: the same call (a node LangGraph ran again, under a new task id).
    again = paying.invoke(call(), config(ns="tools:another-task-id"))
    assert isinstance(first, ToolMessage) and first.content == "paid 5"
    assert again.content == first.content and again.tool_call_id == "call-1"
    assert len(seen) == 1
    # Another call id, or another thread: another call.
    paying.invoke(call("call-2"), config())
    paying.invoke(call(), config(thread="t-2"))
    assert len(seen) == 3
    assert len({key for _, key, _ in seen}) == 3
    # Not called as LangGraph calls a tool: refused, saying why.
    with pytest.raises(ValueError, match="tool call"):
        paying.invoke({"amount": 5}, config())
    with pytest.raises(ValueError, match="thread_id"):
        paying.invoke(call("call-9"), {"configurable": {}})


def test_an_ambiguous_call_is_resent_queried_or_reported_by_its_kind(saver):
    sent = {"mail": 0, "charge": 0, "wire": 0}

    def flaky(name):
        def act(amount: int) -> str:
            sent[name] += 1
            if sent[name] == 1:
                raise actum.OutcomeUnknown("the connection dropped after sending")
            return f"{name} {amount}"
        act.__name__ = name
        act.__doc__ = name
        return tool(act)

    mail = exactly_once(flaky("mail"), saver, kind="idempotent", window_ms=60_000)
    with pytest.raises(UnknownEffect):
        mail.invoke(call("m"), config())
    # Resent with the same key: the mail service deduplicates.
    assert mail.invoke(call("m"), config()).content == "mail 5"
    assert sent["mail"] == 2

    asked = []
    charge = exactly_once(
        flaky("charge"), saver, kind="queryable",
        query=lambda keys: asked.append(keys.key) or "charge 5 (found)",
    )
    with pytest.raises(UnknownEffect):
        charge.invoke(call("c"), config())
    # Asked, never sent again.
    assert charge.invoke(call("c"), config()).content == "charge 5 (found)"
    assert sent["charge"] == 1 and len(asked) == 1

    wire = exactly_once(flaky("wire"), saver, kind="not_idempotent")
    with pytest.raises(UnknownEffect):
        wire.invoke(call("w"), config())
    with pytest.raises(UnknownEffect) as unknown:
        wire.invoke(call("w"), config())
    assert sent["wire"] == 1, "a not-idempotent call is never sent again"
    assert unknown.value.key.endswith("/1")


def test_a_query_with_no_record_opens_the_next_attempt(saver):
    runs = []

    @tool
    def charge(amount: int) -> str:
        """Charge."""
        runs.append(current_call().key)
        if len(runs) == 1:
            raise actum.OutcomeUnknown("timed out")
        return "charged"

    charging = exactly_once(charge, saver, kind="queryable", query=lambda keys: None)
    with pytest.raises(UnknownEffect):
        charging.invoke(call("c"), config())
    assert charging.invoke(call("c"), config()).content == "charged"
    assert [k[-2:] for k in runs] == ["/1", "/2"]


def test_a_failing_tool_is_a_tool_error_and_is_not_run_again(saver):
    runs = []

    @tool
    def refund(amount: int) -> str:
        """Refund."""
        runs.append(amount)
        raise actum.ToolFailed("card expired")

    refunding = exactly_once(refund, saver, kind="idempotent", window_ms=60_000)
    for _ in range(2):
        with pytest.raises(Exception, match="card expired"):
            refunding.invoke(call("r"), config())
    assert runs == [5]


def test_a_journaled_model_answers_the_same_input_from_the_journal(saver):
    asked = []

    def model(messages):
        asked.append(len(messages))
        return AIMessage("", tool_calls=[{"name": "pay", "args": {}, "id": f"call-{len(asked)}"}])

    journal = journaled(RunnableLambda(model), saver)
    first = journal.invoke([HumanMessage("pay 5", id="a")], config(ns="agent:task-1"))
    # LangGraph ran the node again: a new task id, new message ids.
    again = journal.invoke([HumanMessage("pay 5", id="b")], config(ns="agent:task-2"))
    assert again.tool_calls[0]["id"] == first.tool_calls[0]["id"] == "call-1"
    assert asked == [1]
    other = journal.invoke([HumanMessage("pay 6")], config(ns="agent:task-3"))
    assert other.tool_calls[0]["id"] == "call-2"
    elsewhere = journal.invoke([HumanMessage("pay 5")], config(thread="t-2"))
    assert elsewhere.tool_calls[0]["id"] == "call-3"


def test_the_journal_and_ledger_outlive_a_reopen(tmp_path):
    runs = []

    @tool
    def pay(amount: int) -> str:
        """Pay."""
        runs.append(amount)
        return "paid"

    for _ in range(2):
        with ActumSaver.from_path(tmp_path / "books") as saver:
            paying = exactly_once(pay, saver, kind="not_idempotent")
            assert paying.invoke(call(), config()).content == "paid"
    assert runs == [5]


def test_wrong_declarations_are_refused(saver):
    @tool
    def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    with pytest.raises(ValueError, match="window_ms"):
        exactly_once(pay, saver, kind="idempotent")
    with pytest.raises(ValueError, match="query"):
        exactly_once(pay, saver, kind="queryable")
    with pytest.raises(ValueError, match="kind"):
        exactly_once(pay, saver, kind="sometimes")
    with pytest.raises(TypeError, match="ActumSaver"):
        exactly_once(pay, object(), kind="not_idempotent")


def test_a_failed_model_call_is_asked_again(saver):
    asked = []

    def model(messages):
        asked.append(1)
        if len(asked) == 1:
            raise TimeoutError("rate limited")
        return AIMessage("ok")

    journal = journaled(RunnableLambda(model), saver)
    with pytest.raises(TimeoutError):
        journal.invoke([HumanMessage("hi")], config())
    assert journal.invoke([HumanMessage("hi")], config()).content == "ok"
    assert journal.invoke([HumanMessage("hi")], config()).content == "ok"
    assert len(asked) == 2
