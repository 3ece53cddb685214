"""A LangGraph agent killed with SIGKILL at random points, and resumed.

    python python/examples/langgraph_kill.py --saver sqlite --durability sync
    python python/examples/langgraph_kill.py --saver actum --durability async --threads 40

A ReAct-style graph: a model node (a fake chat model that asks for two
tools, then answers) and a ToolNode with

* ``charge``: applies every request it receives (a line in charges.log),
  deduplicating nothing, but can be asked whether a key was applied;
* ``mail``: deduplicates by key (a mail with a key it has seen is not sent
  again).

Each thread is run in a child process that kills itself with SIGKILL at a
point chosen by the seed: right after a tool acted, right after the model
answered, before or after a checkpoint write. The parent starts the child
again until the thread completes. With ``--saver sqlite`` (SqliteSaver, the
tools called as LangGraph calls them, the mail keyed by the tool call id)
effects repeat; with ``--saver actum`` (ActumSaver, the model journaled and
both tools ``exactly_once``) each thread charges once and mails once.

Prints one line per run and the totals; exits 1 if ``--expect-zero`` is given
and any effect repeated or a thread did not complete.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import InjectedToolArg, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

# ----- the world: two services that outlive the agent's process -----


def _append(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


class Kills:
    """Counts the points the child passes; dies at the chosen one."""

    def __init__(self, at: int | None) -> None:
        self.at = at
        self.passed = 0

    def point(self, where: str) -> None:
        self.passed += 1
        if self.at is not None and self.passed == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


def child(args: argparse.Namespace) -> int:
    world = Path(args.world)
    rng = random.Random(args.seed)
    # About one child in four runs to the end; the others die at one of the
    # first dozen points (the first seven under `exit` durability, which
    # writes checkpoints only at the end and so passes fewer).
    last = 7 if args.durability == "exit" else 12
    kills = Kills(None if rng.random() < 0.25 else rng.randint(1, last))
    thread_id = args.thread

    def charge_world(amount: int, key: str) -> str:
        _append(world / "charges.log", json.dumps([thread_id, amount, key]))
        kills.point("charged")
        return f"charged {amount} EUR"

    def mail_world(to: str, key: str) -> str:
        sent = {json.loads(line)[2] for line in _lines(world / "mails.log")}
        if key not in sent:
            _append(world / "mails.log", json.dumps([thread_id, to, key]))
        kills.point("mailed")
        return f"mailed {to}"

    def fake_model(messages):
        messages = messages["messages"] if isinstance(messages, dict) else messages
        kills.point("model asked")
        if not any(isinstance(m, ToolMessage) for m in messages):
            # A real model: fresh tool call ids every time it is asked.
            return AIMessage(
                content="",
                tool_calls=[
                    {"name": "charge", "args": {"amount": 42}, "id": f"call-{uuid.uuid4()}"},
                    {"name": "mail", "args": {"to": "ann@example.com"}, "id": f"call-{uuid.uuid4()}"},
                ],
            )
        return AIMessage(content="charged and mailed")

    if args.saver == "actum":
        from actum.langgraph import ActumSaver, exactly_once, journaled

        opened = ActumSaver.from_path(world / "books")
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver

        opened = SqliteSaver.from_conn_string(str(world / "books.sqlite"))

    with opened as saver:
        if args.saver == "sqlite":
            saver.conn.execute("PRAGMA synchronous=FULL")
        real_put, real_put_writes, real_get_tuple = saver.put, saver.put_writes, saver.get_tuple

        def put(*a, **k):
            kills.point("before put")
            out = real_put(*a, **k)
            kills.point("after put")
            return out

        def put_writes(*a, **k):
            kills.point("before put_writes")
            out = real_put_writes(*a, **k)
            kills.point("after put_writes")
            return out

        saver.put, saver.put_writes = put, put_writes

        if args.saver == "actum":

            @tool
            def charge(amount: int, idempotency_key: Annotated[str, InjectedToolArg]) -> str:
                """Charge the customer."""
                return charge_world(amount, idempotency_key)

            @tool
            def mail(to: str, idempotency_key: Annotated[str, InjectedToolArg]) -> str:
                """Mail the customer."""
                return mail_world(to, idempotency_key)

            def charged(call):
                found = [json.loads(x) for x in _lines(world / "charges.log")]
                hit = [c for c in found if c[2] == call.key]
                return f"charged {hit[0][1]} EUR" if hit else None

            tools = [
                exactly_once(charge, saver, kind="queryable", query=charged),
                exactly_once(mail, saver, kind="idempotent", window_ms=86_400_000),
            ]
            model = RunnableLambda(fake_model)
            if not args.no_journal:
                model = journaled(model, saver)
        else:

            @tool
            def charge(amount: int) -> str:
                """Charge the customer."""
                return charge_world(amount, "-")

            @tool
            def mail(to: str, tool_call_id: Annotated[str, InjectedToolArg]) -> str:
                """Mail the customer."""
                return mail_world(to, tool_call_id)

            class KeyedToolNode(ToolNode):
                # The best a LangGraph user has as a key: the tool call's id.
                def _inject_tool_args(self, call, runtime, tool_):
                    call = super()._inject_tool_args(call, runtime, tool_)
                    if call["name"] == "mail":
                        call = {**call, "args": {**call["args"], "tool_call_id": call["id"]}}
                    return call

            tools = [charge, mail]
            model = RunnableLambda(fake_model)

        def agent(state: MessagesState):
            return {"messages": [model.invoke(state["messages"])]}

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_node("tools", ToolNode(tools) if args.saver == "actum" else KeyedToolNode(tools))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": thread_id}}
        state = graph.get_state(config)
        messages = state.values.get("messages", []) if state.values else []
        if messages and messages[-1].content == "charged and mailed":
            return 0
        # A thread with a checkpoint goes on from it (its pending writes
        # applied); one without starts from its input.
        started = real_get_tuple(config) is not None
        start = None if started else {"messages": [HumanMessage("charge 42 EUR and mail ann")]}
        graph.invoke(start, config, durability=args.durability)
        done = graph.get_state(config)
        assert not done.next and done.values["messages"][-1].content == "charged and mailed"
    return 0


def parent(args: argparse.Namespace) -> int:
    world = Path(args.world or tempfile.mkdtemp(prefix="actum-langgraph-kill-"))
    world.mkdir(parents=True, exist_ok=True)
    kills = 0
    unfinished = []
    started = time.monotonic()
    for t in range(args.threads):
        thread_id = f"order-{t}"
        for attempt in range(args.attempts):
            seed = args.seed * 1_000_003 + t * 1_009 + attempt
            proc = subprocess.run(
                [sys.executable, __file__, "--child", "--world", str(world), "--thread", thread_id,
                 "--seed", str(seed), "--saver", args.saver, "--durability", args.durability,
                 *(["--no-journal"] if args.no_journal else [])],
                capture_output=True, text=True,
            )
            if proc.returncode == -signal.SIGKILL:
                kills += 1
                continue
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                print(f"{thread_id}: the child failed (exit {proc.returncode}); replay: "
                      f"python {__file__} --child --world {world} --thread {thread_id} --seed {seed} "
                      f"--saver {args.saver} --durability {args.durability}", file=sys.stderr)
                return 2
            break
        else:
            unfinished.append(thread_id)
    charges = {}
    for thread, _, _ in (json.loads(x) for x in _lines(world / "charges.log")):
        charges[thread] = charges.get(thread, 0) + 1
    mails = {}
    for thread, _, _ in (json.loads(x) for x in _lines(world / "mails.log")):
        mails[thread] = mails.get(thread, 0) + 1
    dup_charges = sum(n - 1 for n in charges.values() if n > 1)
    dup_mails = sum(n - 1 for n in mails.values() if n > 1)
    missing = [f"order-{t}" for t in range(args.threads)
               if f"order-{t}" not in unfinished and (charges.get(f"order-{t}", 0) == 0 or mails.get(f"order-{t}", 0) == 0)]
    print(f"{args.saver} durability={args.durability} seed={args.seed}: {args.threads} threads, "
          f"{kills} SIGKILLs, {dup_charges} duplicate charges "
          f"({sum(1 for n in charges.values() if n > 1)} threads charged twice or more), "
          f"{dup_mails} duplicate mails, {len(unfinished)} threads unfinished, "
          f"{len(missing)} completed without their effects; {time.monotonic() - started:.0f} s; world {world}")
    if args.expect_zero and (dup_charges or dup_mails or unfinished or missing):
        print(f"FAILED: replay with python {__file__} --saver {args.saver} --durability "
              f"{args.durability} --threads {args.threads} --seed {args.seed}", file=sys.stderr)
        return 1
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--saver", choices=["actum", "sqlite"], default="actum")
    p.add_argument("--durability", choices=["sync", "async", "exit"], default="sync")
    p.add_argument("--threads", type=int, default=20)
    p.add_argument("--attempts", type=int, default=60, help="child starts per thread at most")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--world", help="the directory of the books and the services' logs")
    p.add_argument("--expect-zero", action="store_true")
    p.add_argument("--no-journal", action="store_true",
                   help="actum without the model's journal: a node run again asks the model "
                        "again and gets new tool call ids, so the keys change (shows why "
                        "the journal is needed)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--thread", help=argparse.SUPPRESS)
    args = p.parse_args()
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main())
