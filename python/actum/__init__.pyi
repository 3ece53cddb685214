"""Type stubs for actum: the engine and its durable runtime from Python."""

from os import PathLike
from typing import Any, Awaitable, Callable, Coroutine, Optional, Sequence, Union

_Path = Union[str, "PathLike[str]"]

ENGINE_ERRORS: list[str]
"""The names of the engine error classes, one per engine `Error` variant."""

class Engine:
    """An open actum database: a directory (one process per directory), or a PostgreSQL
    database (`Engine.open("postgres://...")`, any number of processes).

    >>> with Engine.open("books") as engine:
    ...     runtime = Runtime(engine)
    """

    @classmethod
    def open(cls, path: _Path, *, operator_channel: bool = False) -> "Engine":
        """Opens (or creates) the database in `path`; raises `Locked` if it is open already.

        With `operator_channel=True` it serves the operator channel until closed (a Unix
        socket in `path/operator/`), so `actum pause`, `approve` and the other writes of
        the `actum` command reach it while it runs.

        A `str` starting with `postgres://` or `postgresql://` opens the books in that
        PostgreSQL database instead, e.g.
        `Engine.open("postgres://agents@db.internal:5432/books")`: any number of processes
        may open it at once; `operator_channel=True` raises `InvalidConfig` there (the
        `actum` command opens the database itself), an unreachable server `Postgres`."""
    def close(self) -> None:
        """Shuts the runtimes over it down and closes it cleanly; a second close does nothing."""
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> str:
        """The database directory, or the PostgreSQL URL without its password."""
    def __enter__(self) -> "Engine": ...
    def __exit__(self, *exc: object) -> bool: ...
    def state(self, run_id: str) -> Optional[str]:
        """The run's state ("pending", "running", "completed", "failed", ...), or None."""
    def audit(self, run_id: str) -> list[tuple[str, str]]:
        """The run's journal, oldest first: (what, why) per entry."""
    def signal(self, run_id: str, name: str, payload: bytes, sender: str = "python") -> None:
        """Sends the signal `name` to the run; a run waiting for it wakes."""
    def decide_approval(
        self,
        run_id: str,
        step: str,
        args: bytes,
        approver: str,
        role: str,
        approve: bool = True,
        note: str = "",
    ) -> bool:
        """Decides the approval the run waits for at `step`; True if it woke."""
    def deliver_reply(
        self,
        key: str,
        receipt: Optional[bytes] = None,
        *,
        failed: Optional[str] = None,
        sender: str = "python",
    ) -> Optional[str]:
        """The reply to a `ctx.step_async` request: `receipt` confirms it, `failed`
        fails it; returns the waiting step's name, or None if none waited yet."""
    def set_budget(
        self,
        run_id: str,
        *,
        tokens_in: Optional[int] = None,
        tokens_out: Optional[int] = None,
        cost_micros: Optional[int] = None,
        tool_calls: Optional[int] = None,
        wall_ms: Optional[int] = None,
        by: str = "python",
        reason: str = "",
    ) -> None:
        """Sets the run's budget limits (None: no limit); a run with no room for its next call is paused."""
    def budget(self, run_id: str) -> dict[str, Any]:
        """The run's budget book: "limits" (dict or None), "spent", "reserved" (dicts), "ran_ms"."""
    def operate(self, run_id: str, action: str, operator: str = "python", reason: str = "") -> str:
        """"pause", "resume", "cancel" (its saga undoes) or "abandon" (a saga); returns the new state."""

class Started:
    """What `Runtime.start` did."""

    run_id: str
    created: bool
    agent: str

class Worked:
    """What driving one run came to: outcome is "completed", "ended", "compensating",
    "parked", "paused", "lease_lost", "shut_down" or "skipped"."""

    run_id: str
    outcome: str
    detail: Optional[str]

class Call:
    """What a tool function (an act or a query) receives."""

    key: str
    idempotency_key: str
    token: int
    resend: bool
    deadline_ms: int
    run: str
    step: str
    attempt: int

class UndoCall:
    """What an undo function receives (`Runtime.register_undo`)."""

    key: str
    idempotency_key: str
    token: int
    resend: bool
    query: bool
    deadline_ms: int
    run: str
    step: str
    @property
    def args(self) -> bytes: ...
    @property
    def receipt(self) -> Optional[bytes]:
        """The receipt of the act being undone; None if it was never confirmed."""

class Usage:
    """What a model call cost (`Ctx.decide_with_usage`)."""

    tokens_in: int
    tokens_out: int
    cost_micros: int
    def __init__(self, tokens_in: int = 0, tokens_out: int = 0, cost_micros: int = 0) -> None: ...

class ChildOutput:
    """How one child of a fan-out (`Ctx.children`) ended."""

    run_id: str
    index: int
    state: str
    @property
    def output(self) -> Optional[bytes]:
        """Its output if it completed, else None."""
    @property
    def completed(self) -> bool: ...

class Approval:
    """How an approval ended."""

    status: str
    approver: str
    note: str
    @property
    def approved(self) -> bool: ...

class Tool:
    """A tool a step calls, declared with its class."""

    @staticmethod
    def idempotent(
        name: str,
        *,
        window_ms: int,
        attempts: int = 1,
        backoff_ms: Optional[tuple[int, int]] = None,
        ignores_tokens: bool = False,
        request_lifetime_ms: Optional[int] = None,
    ) -> "Tool":
        """Deduplicates by idempotency key for `window_ms`: an ambiguous request is resent."""
    @staticmethod
    def queryable(
        name: str,
        *,
        query: Callable[[Call], Optional[bytes]],
        attempts: int = 1,
        backoff_ms: Optional[tuple[int, int]] = None,
        ignores_tokens: bool = False,
        request_lifetime_ms: Optional[int] = None,
    ) -> "Tool":
        """Can be asked what a key did: `query(call)` returns the receipt, or None if unknown to it."""
    @staticmethod
    def not_idempotent(
        name: str, *, attempts: int = 1, backoff_ms: Optional[tuple[int, int]] = None
    ) -> "Tool":
        """Neither deduplicates nor can be asked: an ambiguous request pauses the run."""
    def hold(
        self, *, cost_micros: int = 0, tokens_in: int = 0, tokens_out: int = 0, tool_calls: int = 1
    ) -> "Tool":
        """The same tool, each call holding this much of its run's budget until confirmed."""
    @property
    def held(self) -> dict[str, int]: ...
    @property
    def name(self) -> str: ...
    @property
    def class_name(self) -> str: ...

_Bytes = Optional[bytes]
_Act = Callable[[Call], Union[_Bytes, Awaitable[_Bytes]]]
_Undo = Callable[[UndoCall], Union[_Bytes, Awaitable[_Bytes]]]

class Ctx:
    """What an agent function receives; valid only while it runs.

    Each call has a synchronous form (`ctx.decide(...)`) and an awaitable
    one (`await ctx.adecide(...)`) for `async def` agents: the engine works
    on a thread of asyncio's while the agent's event loop goes on. An
    awaitable call is made when first awaited. One call is in flight at a
    time: a call made while another is (tasks racing each other,
    `asyncio.gather` over ctx calls) raises `ActumError` and is not made, so
    a run's calls keep the order of the agent's code. A model, act, query or
    undo may be an `async def`: it runs to completion where it is called.

    An `async def` agent awaiting its calls::

        charge = actum.Tool.idempotent("charge", window_ms=86_400_000)

        async def act(call):
            return b"charged " + call.idempotency_key.encode()

        with actum.Engine.open("books") as engine:
            runtime = actum.Runtime(engine)

            @runtime.agent("refund")
            async def refund(ctx):
                plan = await ctx.adecide("plan", ctx.input, lambda: b"refund 90 EUR")
                return await ctx.astep("charge", charge, plan, act)

            runtime.start("refund", "refund-42", b"90 EUR")
            runtime.drain()
            assert runtime.output("refund-42").startswith(b"charged ")
    """

    @property
    def run_id(self) -> str: ...
    @property
    def input(self) -> bytes: ...
    def decide(
        self, name: str, input: bytes, model: Callable[[], Union[bytes, Awaitable[bytes]]]
    ) -> bytes:
        """A journaled model call: `model()` once, its bytes replayed on every resume."""
    def decide_with_usage(
        self,
        name: str,
        input: bytes,
        model: Callable[[], Union[tuple[bytes, Usage], Awaitable[tuple[bytes, Usage]]]],
    ) -> bytes:
        """`decide`, and the call's usage journaled and charged to the run's budget."""
    def step(self, name: str, tool: Tool, args: bytes, act: _Act) -> bytes:
        """A tool call through the ledger: `act(call)` at most once per attempt; returns the receipt."""
    def step_with_undo(
        self, name: str, tool: Tool, args: bytes, act: _Act, *, undo: tuple[Tool, bytes]
    ) -> bytes:
        """`step`, undone by `undo=(undo_tool, undo_args)` if the run fails or is cancelled later."""
    def step_async(
        self,
        name: str,
        tool: Tool,
        args: bytes,
        send: Callable[[Call], Optional[bytes]],
        within_ms: Optional[int] = None,
    ) -> bytes:
        """A call answered later: `send` returns None (accepted) and the run parks
        until `Engine.deliver_reply(call.key, ...)`; returns the reply's receipt."""
    def checkpoint(self, state: bytes) -> None:
        """Saves the state with the next step's outcome (or wait, model call, end)."""
    def last_checkpoint(self) -> Optional[bytes]: ...
    def approval(self, name: str, args: bytes, role: str, within_ms: int) -> Approval:
        """Parks the run until a person of `role` decides, or `within_ms` passes."""
    def sleep(self, name: str, ms: int) -> None:
        """A durable timer of `ms` from when it was first set."""
    def sleep_until(self, name: str, at_ms: int) -> None: ...
    def signal(self, name: str, within_ms: Optional[int] = None) -> Optional[bytes]:
        """Waits for the signal `name`; None if `within_ms` passed first."""
    def child(self, name: str, kind: str, input: bytes) -> bytes:
        """Runs a child run of `kind` and returns its output."""
    def children(
        self, name: str, calls: Sequence[tuple[str, bytes]], join: str = "all"
    ) -> list[ChildOutput]:
        """A fan-out: one child run per (kind, input); waits for "all" or the "first"."""
    # The awaitable forms: each is its synchronous twin above, awaited.
    def adecide(
        self, name: str, input: bytes, model: Callable[[], Union[bytes, Awaitable[bytes]]]
    ) -> Coroutine[Any, Any, bytes]:
        """`await`: `decide`, the engine working off the event loop's thread."""
    def adecide_with_usage(
        self,
        name: str,
        input: bytes,
        model: Callable[[], Union[tuple[bytes, Usage], Awaitable[tuple[bytes, Usage]]]],
    ) -> Coroutine[Any, Any, bytes]:
        """`await`: `decide_with_usage`."""
    def astep(
        self, name: str, tool: Tool, args: bytes, act: _Act
    ) -> Coroutine[Any, Any, bytes]:
        """`await`: `step`."""
    def astep_with_undo(
        self, name: str, tool: Tool, args: bytes, act: _Act, *, undo: tuple[Tool, bytes]
    ) -> Coroutine[Any, Any, bytes]:
        """`await`: `step_with_undo`."""
    def astep_async(
        self,
        name: str,
        tool: Tool,
        args: bytes,
        send: Callable[[Call], Optional[bytes]],
        within_ms: Optional[int] = None,
    ) -> Coroutine[Any, Any, bytes]:
        """`await`: `step_async`."""
    def acheckpoint(self, state: bytes) -> Coroutine[Any, Any, None]:
        """`await`: `checkpoint`."""
    def alast_checkpoint(self) -> Coroutine[Any, Any, Optional[bytes]]:
        """`await`: `last_checkpoint`."""
    def aapproval(
        self, name: str, args: bytes, role: str, within_ms: int
    ) -> Coroutine[Any, Any, Approval]:
        """`await`: `approval`."""
    def asleep(self, name: str, ms: int) -> Coroutine[Any, Any, None]:
        """`await`: `sleep` (a durable timer, not `asyncio.sleep`)."""
    def asleep_until(self, name: str, at_ms: int) -> Coroutine[Any, Any, None]:
        """`await`: `sleep_until`."""
    def asignal(
        self, name: str, within_ms: Optional[int] = None
    ) -> Coroutine[Any, Any, Optional[bytes]]:
        """`await`: `signal`."""
    def achild(self, name: str, kind: str, input: bytes) -> Coroutine[Any, Any, bytes]:
        """`await`: `child`."""
    def achildren(
        self, name: str, calls: Sequence[tuple[str, bytes]], join: str = "all"
    ) -> Coroutine[Any, Any, list[ChildOutput]]:
        """`await`: `children`."""

Agent = Callable[[Ctx], Union[Optional[bytes], Coroutine[Any, Any, Optional[bytes]]]]

class Runtime:
    """The durable runtime over an engine: serves agent functions."""

    def __init__(
        self,
        engine: Engine,
        *,
        worker: str = "python",
        lease_ttl_ms: int = 30000,
        decision_hold: Optional[Usage] = None,
    ) -> None: ...
    def register(
        self, kind: str, version: str, handler: Agent, *, compatible: Optional[Sequence[str]] = None
    ) -> None:
        """Serves `kind` at `version` (a def or an async def); `compatible`: older versions it resumes."""
    def register_compatible(
        self, kind: str, version: str, compatible: Sequence[str], handler: Agent
    ) -> None:
        """Serves `kind` at `version`, resuming the runs of the `compatible` versions too."""
    def agent(
        self, kind: str, version: str = "1", *, compatible: Optional[Sequence[str]] = None
    ) -> Callable[[Agent], Agent]:
        """Decorator: registers the function as agent `kind` at `version`."""
    def register_undo(self, tool: Union[Tool, str], undo: _Undo) -> None:
        """What undoes the acts whose compensation names `tool`, in a failed or cancelled run's saga."""
    def register_tool(self, tool: Tool) -> None:
        """Declares `tool` for the saga's calls outside a handler (queries of acts left open)."""
    def start(self, kind: str, run_id: str, input: bytes) -> Started: ...
    def work_once(self, worker: Optional[str] = None) -> Optional[Worked]:
        """Drives one claimable run on this thread; None if there was none."""
    def drain(self, max_runs: int = 100000) -> list[Worked]:
        """`work_once` until nothing is claimable."""
    def run(self, threads: int = 1) -> None:
        """Serves on `threads` worker threads until `shutdown()` (or Ctrl-C)."""
    def awork_once(self, worker: Optional[str] = None) -> Coroutine[Any, Any, Optional[Worked]]:
        """`await`: `work_once` on a thread of asyncio's."""
    def adrain(self, max_runs: int = 100000) -> Coroutine[Any, Any, list[Worked]]:
        """`await`: `drain` on a thread of asyncio's."""
    def arun(self, threads: int = 1) -> Coroutine[Any, Any, None]:
        """`await`: `run` on a thread of asyncio's, until `shutdown()`."""
    def shutdown(self) -> None: ...
    def restart(self) -> None: ...
    def output(self, run_id: str) -> Optional[bytes]: ...
    def stats(self) -> dict[str, int]: ...

class ActumError(Exception):
    """The base of every error actum raises."""

class EngineClosed(ActumError):
    """The engine was used after `close()`."""

class EngineForked(EngineClosed):
    """The engine (or a runtime or ctx over it) was used in a process forked from the one that opened it."""

class StepFailed(ActumError):
    """A step failed for good; the agent may handle it."""

    reason: str

class Stopped(BaseException):
    """The runtime stopped the agent at a ctx call (a wait, a shutdown, a lost lease, ...)."""

class ToolFailed(Exception):
    """Raised by a tool function: the request failed and had no effect."""

    reason: str
    retryable: bool
    def __init__(self, reason: str, retryable: bool = False) -> None: ...

class OutcomeUnknown(Exception):
    """Raised by a tool function: whether the request took effect is not known."""

    reason: str
    def __init__(self, reason: str) -> None: ...

class Io(ActumError):
    """The engine's `Error::Io`."""
    op: str
    path: str
    source: str

class Corrupt(ActumError):
    """The engine's `Error::Corrupt`."""
    file: str
    offset: int
    reason: str

class Locked(ActumError):
    """The engine's `Error::Locked`."""
    dir: str

class NoDatabase(ActumError):
    """The engine's `Error::NoDatabase`."""
    dir: str
    found: str

class SnapshotUnstable(ActumError):
    """The engine's `Error::SnapshotUnstable`."""
    dir: str
    attempts: int
    changed: str

class Poisoned(ActumError):
    """The engine's `Error::Poisoned`."""
    cause: ActumError

class RecordTooLarge(ActumError):
    """The engine's `Error::RecordTooLarge`."""
    size_bytes: int
    max_bytes: int

class ForeignFile(ActumError):
    """The engine's `Error::ForeignFile`."""
    file: str
    expected: str
    found: str

class UnsupportedFormat(ActumError):
    """The engine's `Error::UnsupportedFormat`."""
    file: str
    found: int
    supported: int

class UnsupportedPayload(ActumError):
    """The engine's `Error::UnsupportedPayload`."""
    file: str
    offset: int
    lsn: int
    found: int
    supported: list[int]

class NoValidManifest(ActumError):
    """The engine's `Error::NoValidManifest`."""
    dir: str
    reasons: list[str]

class LsnOutOfRange(ActumError):
    """The engine's `Error::LsnOutOfRange`."""
    requested: int
    first: int
    last: int

class InvalidConfig(ActumError):
    """The engine's `Error::InvalidConfig`."""
    reason: str

class StateStore(ActumError):
    """The engine's `Error::StateStore`."""
    file: str
    op: str
    source: str

class Postgres(ActumError):
    """The engine's `Error::Postgres` (the books in PostgreSQL)."""
    server: str
    op: str
    may_have_landed: bool
    source: str

class NotOnPostgres(ActumError):
    """The engine's `Error::NotOnPostgres`: a call of the embedded engine's
    directory on books kept in PostgreSQL."""
    what: str
    instead: str

class InvalidName(ActumError):
    """The engine's `Error::InvalidName`."""
    what: str
    name: str
    reason: str

class InvalidCommand(ActumError):
    """The engine's `Error::InvalidCommand`."""
    reason: str

class NotFound(ActumError):
    """The engine's `Error::NotFound`."""
    what: str

class RunInputMismatch(ActumError):
    """The engine's `Error::RunInputMismatch`."""
    run: str
    recorded: str
    presented: str

class RunNotRunning(ActumError):
    """The engine's `Error::RunNotRunning`."""
    run: str
    state: str
    refused: str

class RunTerminal(ActumError):
    """The engine's `Error::RunTerminal`."""
    run: str
    state: str

class IllegalTransition(ActumError):
    """The engine's `Error::IllegalTransition`."""
    run: str
    # `from` (str) too: a keyword, so read it with getattr(e, "from").
    to: str

class VersionConflict(ActumError):
    """The engine's `Error::VersionConflict`."""
    run: str
    expected: int
    actual: int

class LeaseHeld(ActumError):
    """The engine's `Error::LeaseHeld`."""
    run: str
    worker: str
    expires_ms: int

class LeaseLost(ActumError):
    """The engine's `Error::LeaseLost`."""
    run: str
    token: int

class GuardOfAnotherRun(ActumError):
    """The engine's `Error::GuardOfAnotherRun`."""
    run: str
    guard_run: str

class Fenced(ActumError):
    """The engine's `Error::Fenced`."""
    run: str
    presented: int
    current: int

class ArgsMismatch(ActumError):
    """The engine's `Error::ArgsMismatch`."""
    key: str
    recorded: str
    presented: str

class EffectNotOpen(ActumError):
    """The engine's `Error::EffectNotOpen`."""
    key: str
    status: str

class Divergence(ActumError):
    """The engine's `Error::Divergence`."""
    run: str
    position: int
    recorded: str
    attempted: str

class SchemaMismatch(ActumError):
    """The engine's `Error::SchemaMismatch`."""
    run: str
    found: int
    expected: int

class TooLarge(ActumError):
    """The engine's `Error::TooLarge`."""
    what: str
    size_bytes: int
    max_bytes: int

class BatchRefused(ActumError):
    """The engine's `Error::BatchRefused`."""
    index: int
    cause: ActumError

class Inconsistent(ActumError):
    """The engine's `Error::Inconsistent`."""
    what: str

class Halted(ActumError):
    """The engine's `Error::Halted`."""
    after: str
    cause: Optional[ActumError]

class WaitMismatch(ActumError):
    """The engine's `Error::WaitMismatch`."""
    run: str
    step: str
    recorded: str
    presented: str

class WaitOpen(ActumError):
    """The engine's `Error::WaitOpen`."""
    run: str
    step: str
    waits_for: str

class WaitEnded(ActumError):
    """The engine's `Error::WaitEnded`."""
    run: str
    step: str
    status: str

class ApprovalExpired(ActumError):
    """The engine's `Error::ApprovalExpired`."""
    run: str
    step: str
    deadline_ms: int
    now_ms: int

class ApprovalMismatch(ActumError):
    """The engine's `Error::ApprovalMismatch`."""
    run: str
    step: str
    bound: str
    presented: str

class NotReserved(ActumError):
    """The engine's `Error::NotReserved`."""
    run: str
    charge: str

class BudgetExhausted(ActumError):
    """The engine's `Error::BudgetExhausted`."""
    run: str
    step: str
    limit: str

class NotApproved(ActumError):
    """The engine's `Error::NotApproved`."""
    run: str
    step: str
    status: str

class ResourceHeld(ActumError):
    """The engine's `Error::ResourceHeld`."""
    resource: str
    holder: str
    expires_ms: int

class ResourceNotHeld(ActumError):
    """The engine's `Error::ResourceNotHeld`."""
    resource: str
    run: str

class SharedVersionConflict(ActumError):
    """The engine's `Error::SharedVersionConflict`."""
    key: str
    expected: int
    actual: int

class SagaOutstanding(ActumError):
    """The engine's `Error::SagaOutstanding`."""
    run: str
    next: str

class ApproverRole(ActumError):
    """The engine's `Error::ApproverRole`."""
    run: str
    step: str
    required: str
    presented: str

class OpDecode(ActumError):
    """The engine's `Error::OpDecode`."""
    reason: str

class AgentVersionMismatch(ActumError):
    """The engine's `Error::AgentVersionMismatch`."""
    run: str
    expected: str
    found: str

class RetryRefused(ActumError):
    """The engine's `Error::RetryRefused`."""
    run: str
    reason: str

def scratch_database(url: str, prefix: str) -> str:
    """A test helper (in `actum._actum`): makes a new, empty database on the PostgreSQL
    server `url` names and returns its URL, for `Engine.open`."""
