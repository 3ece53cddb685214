"""What one save costs through the LangGraph saver's engine calls: a small
record, a 10 KB part saved whole, and the same 10 KB appended to a chain
(the engine's append form, rebased every 60 saves).

    target/venv/bin/python python/bench/save_cost.py     # after maturin develop --release

Prints the p50 of 300 saves each.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import actum
from actum._actum import _ThreadBooks


def p50_ms(save, n: int = 300) -> float:
    times = []
    for i in range(n):
        start = time.perf_counter()
        save(i)
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 3)


def main() -> None:
    with tempfile.TemporaryDirectory() as path, actum.Engine.open(Path(path) / "books") as engine:
        books = _ThreadBooks(engine)

        def value(i: int) -> bytes:
            return bytes([i % 256]) * 9500 + i.to_bytes(4, "little")

        record = ("e", b"r" * 300, None)
        print("300-byte save", p50_ms(lambda i: books.save("lg.a.0", b"a", [record])), "ms p50")
        print(
            "10 KB whole save",
            p50_ms(lambda i: books.save("lg.b.0", b"b", [record, ("v0", value(i), None)])),
            "ms p50",
        )
        last = {"version": 0}

        def append(i: int) -> None:
            version = last["version"]
            base = (version, "v0") if version and version % 60 else None
            last["version"], _ = books.save("lg.c.0", b"c", [record, ("v0", value(i), base)])

        print("10 KB appended save", p50_ms(append), "ms p50")


if __name__ == "__main__":
    main()
