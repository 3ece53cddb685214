"""An engine after os.fork(): every use in the child raises EngineForked and
leaves the parent's files alone; the parent goes on as before."""

import os

import pytest

import actum

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")


def in_child(body):
    """Forks; the child runs body() and reports its result over a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.close(read)
            try:
                result = body()
            except BaseException as e:  # reported, whatever it is
                result = "raised %s: %s" % (type(e).__name__, e)
            os.write(write, str(result).encode())
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    while True:
        chunk = os.read(read, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    return b"".join(chunks).decode()


def test_an_engine_used_in_a_forked_child_raises_and_the_parent_goes_on(tmp_path):
    engine = actum.Engine.open(tmp_path)
    runtime = actum.Runtime(engine)
    runtime.register("k", "1", lambda ctx: ctx.input)
    runtime.start("k", "before", b"1")

    def child():
        results = []
        for use in (
            lambda: engine.state("before"),
            lambda: engine.audit("before"),
            lambda: runtime.start("k", "in-child", b"2"),
            lambda: runtime.drain(),
            lambda: actum.Runtime(engine),
            lambda: engine.close(),
        ):
            try:
                use()
                results.append("no error")
            except actum.EngineForked as e:
                assert isinstance(e, actum.EngineClosed)
                results.append("forked" if "actum.Engine.open" in str(e) else str(e))
        # The child opening the directory itself: the parent holds it.
        try:
            actum.Engine.open(tmp_path)
            results.append("opened")
        except actum.Locked:
            results.append("locked")
        return ",".join(results)

    before = files_of(tmp_path)
    assert in_child(child) == ",".join(["forked"] * 6 + ["locked"])
    assert files_of(tmp_path) == before, "the child wrote to the parent's files"
    # The parent's engine is untouched and works as before.
    runtime.start("k", "after", b"3")
    assert sorted(w.run_id for w in runtime.drain()) == ["after", "before"]
    assert [runtime.output("before"), runtime.output("after")] == [b"1", b"3"]
    assert engine.state("in-child") is None
    engine.close()
    # And it reopens cleanly (the child left no trace in its files).
    with actum.Engine.open(tmp_path) as engine:
        assert engine.state("after") == "completed"


def files_of(directory):
    """Every file under directory, with its bytes."""
    return {
        path: path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()
    }


def test_a_child_that_lets_go_of_the_engine_does_not_close_it(tmp_path):
    # Only the dict holds them, so the child's clear() drops the last
    # references there, as an exiting child's finalizers would.
    held = {"engine": actum.Engine.open(tmp_path)}
    held["runtime"] = actum.Runtime(held["engine"])
    held["runtime"].register("k", "1", lambda ctx: b"ok")
    held["runtime"].start("k", "r1", b"")
    before = files_of(tmp_path)

    def child():
        import gc

        held.clear()
        gc.collect()
        return "let go"

    assert in_child(child) == "let go"
    assert files_of(tmp_path) == before, "the child wrote to the parent's files"
    # The parent still holds the directory, and its engine works.
    with pytest.raises(actum.Locked):
        actum.Engine.open(tmp_path)
    assert [w.outcome for w in held["runtime"].drain()] == ["completed"]
    held["engine"].close()
