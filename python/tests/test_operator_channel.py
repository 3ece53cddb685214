"""An engine opened from Python with operator_channel=True: the `actum`
command's writes reach it while it runs, once per request id."""

import json
import os
import stat
import subprocess
from pathlib import Path

import actum

ROOT = Path(__file__).resolve().parents[2]


def actum_command():
    """The `actum` binary the test command built (`cargo test --workspace`
    builds it before pytest runs); ACTUM_BIN names another."""
    built = Path(os.environ.get("ACTUM_BIN", ROOT / "target" / "debug" / "actum"))
    assert built.exists(), f"no actum binary at {built}: run `cargo build -p actum-cli` first"
    return str(built)


def pause(db, request_id):
    out = subprocess.run(
        [actum_command(), "pause", str(db), "--run", "order-1", "--operator", "anna",
         "--reason", "fraud check", "--request-id", request_id, "--json"],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_live_engine_takes_the_commands_writes_through_its_channel(tmp_path):
    db = tmp_path / "books"
    engine = actum.Engine.open(db, operator_channel=True)
    rt = actum.Runtime(engine)

    @rt.agent("order")
    def order(ctx, data):
        return data

    rt.start("order", "order-1", b"1")
    socket = db / "operator" / "socket"
    assert stat.S_ISSOCK(socket.stat().st_mode)
    assert stat.S_IMODE((db / "operator").stat().st_mode) == 0o700

    first = pause(db, "req-1")
    assert (first["via"], first["before"], first["after"]) == ("channel", "pending", "paused")
    assert engine.state("order-1") == "paused"
    # Its answer lost, the operator sends it again: it is carried out once.
    again = pause(db, "req-1")
    assert again["repeated"] is True
    assert engine.state("order-1") == "paused"

    engine.close()
    assert not socket.exists(), "the socket goes with the engine"
