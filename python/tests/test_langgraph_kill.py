"""The SIGKILL demo's quick mode: a LangGraph agent killed at random points
(after a tool acted, after the model answered, before and after each
checkpoint write) and resumed until every thread completes; with ActumSaver,
a journaled model and exactly-once tools, no effect repeats in any
durability mode. The long mode is in docs/PYTHON.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[1] / "examples" / "langgraph_kill.py"


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_no_effect_repeats_under_sigkill(durability, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(DEMO), "--saver", "actum", "--durability", durability,
         "--threads", "5", "--seed", "7", "--world", str(tmp_path), "--expect-zero"],
        capture_output=True, text=True, timeout=600,
    )
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 duplicate charges" in proc.stdout and " 0 duplicate mails" in proc.stdout
    kills = int(proc.stdout.split(" SIGKILLs")[0].rsplit(" ", 1)[1])
    assert kills >= 3, f"the quick mode killed only {kills} times: {proc.stdout}"


def duplicates(*args: str, tmp_path) -> int:
    proc = subprocess.run(
        [sys.executable, str(DEMO), *args, "--threads", "5", "--world", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(proc.stdout)
    line = proc.stdout
    charges = int(line.split(" duplicate charges")[0].rsplit(" ", 1)[1])
    mails = int(line.split(" duplicate mails")[0].rsplit(" ", 1)[1])
    return charges + mails


def test_the_demo_sees_the_duplicates_sqlite_makes(tmp_path):
    # The check can fail: SqliteSaver, the tools as LangGraph calls them.
    assert duplicates("--saver", "sqlite", "--durability", "sync", "--seed", "1",
                      tmp_path=tmp_path) > 0


def test_without_the_model_journal_keys_change_and_effects_repeat(tmp_path):
    # Exactly-once tools alone are not enough: a node run again asks the
    # model again, which names new tool call ids.
    assert duplicates("--saver", "actum", "--no-journal", "--durability", "exit", "--seed", "7",
                      tmp_path=tmp_path) > 0
