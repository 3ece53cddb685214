"""The Python benches and probes keep running: each in its quick mode, so a
change to the saver or to the bench's shared code cannot leave them broken
until the next time someone measures. They judge nothing here (the figures
come from full runs, docs/PERFORMANCE.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{script} {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_langgraph_bench_and_resume_probe_run(tmp_path):
    out = tmp_path / "bench.json"
    run("langgraph_savers.py", "--threads", "4", "--dir", str(tmp_path), "--json", str(out))
    report = json.loads(out.read_text())
    savers = {r["saver"]: r for r in report["results"]}
    assert set(savers) == {"memory", "sqlite", "actum"}
    assert savers["actum"]["supersteps"] == 4 * 22
    assert savers["actum"]["bytes_per_superstep"] > 0
    assert report["ratios"]["resume_actum_over_sqlite"] > 0
    probe = run("resume_probe.py", str(tmp_path), "--restarts", "2", "--threads", "4")
    for part in ("open", "compile", "get_state", "close", "scan"):
        assert any(line.split()[:2] == ["actum", part] for line in probe.splitlines()), probe


def test_the_put_threads_probe_runs_with_and_without_the_engine():
    for mode in ([], ["--stub"]):
        out = run("put_threads_probe.py", "--threads", "4", "--writers", "2", "--repeat", "1", *mode)
        rate = out.split("writers: ")[1].split(" puts/s")[0]
        assert float(rate.replace(",", "")) > 0, out
