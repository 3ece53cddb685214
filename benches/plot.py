#!/usr/bin/env python3
"""Plots a criterion group's throughput against writer threads, one line per system, as SVG.

Reads `<criterion>/<group>/<system>/<threads>/new/estimates.json` (the mean time per iteration,
in ns, with its 95% interval) and `benchmark.json` beside it (the throughput the bench declared:
elements per iteration), so a point is elements per second: protocols/s for `effect_protocol`,
steps/s for `agent_step`. Prints the figures and the ratios of the first system to every other
one as Markdown tables, and writes the plot (log-scale y) by hand: Python 3's standard library
only.

    python3 benches/plot.py effect_protocol docs/effect_protocol.svg \\
        actum raw_ceiling raw_floor redb sqlite_shared sqlite_per_thread

The first system named is the subject: its line is drawn thickest and the ratio table divides
it by each of the others. A system or thread count with no estimate is left out (a line is
drawn through the points there are).
"""

import argparse
import json
import math
import pathlib
import sys

THREADS = [1, 4, 16, 64]
# One colour per system in every plot; the raw loops (not databases) are drawn dashed.
COLOURS = {
    "actum": "#d62728",
    "step": "#d62728",
    "step_batched": "#e377c2",
    "raw_ceiling": "#1f77b4",
    "raw_floor": "#7f7f7f",
    "redb": "#2ca02c",
    "sqlite_shared": "#9467bd",
    "sqlite_per_thread": "#ff7f0e",
}
OTHER_COLOURS = ["#8c564b", "#17becf", "#bcbd22"]
WIDTH, HEIGHT = 720, 440
LEFT, RIGHT, TOP, BOTTOM = 80, 190, 40, 56
# Intervals wider than this either side of the estimate are shown in the table.
INTERVAL_SHOWN_ABOVE = 0.15


def rate(criterion, group, system, threads):
    """(per second, low, high) for one bench id, or None if criterion has no estimate for it."""
    base = criterion / group / system / str(threads)
    estimates, benchmark = base / "new" / "estimates.json", base / "new" / "benchmark.json"
    if not estimates.exists() or not benchmark.exists():
        return None
    mean = json.loads(estimates.read_text())["mean"]
    throughput = json.loads(benchmark.read_text()).get("throughput") or {"Elements": 1}
    elements = throughput.get("Elements", 1)
    per_ns = lambda ns: elements * 1e9 / ns
    interval = mean["confidence_interval"]
    # A longer time is a lower rate, so the interval's bounds swap.
    return (
        per_ns(mean["point_estimate"]),
        per_ns(interval["upper_bound"]),
        per_ns(interval["lower_bound"]),
    )


def figure(value):
    return f"{value:,.0f}"


def tables(group, systems, points):
    """The figures and the ratios as Markdown, one row per system."""
    head = "| " + group + " | " + " | ".join(f"{t} thread{'s' if t > 1 else ''}" for t in THREADS)
    rule = "|---" * (len(THREADS) + 1) + "|"
    lines = [head + " |", rule]
    for system in systems:
        cells = []
        for t in THREADS:
            point = points.get((system, t))
            if point is None:
                cells.append("-")
                continue
            value, low, high = point
            wide = low < value * (1 - INTERVAL_SHOWN_ABOVE) or high > value * (1 + INTERVAL_SHOWN_ABOVE)
            cells.append(figure(value) + (f" [{figure(low)}-{figure(high)}]" if wide else ""))
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    subject = systems[0]
    lines += ["", f"| {subject} / peer | " + " | ".join(str(t) for t in THREADS) + " |", rule]
    for system in systems[1:]:
        cells = []
        for t in THREADS:
            mine, theirs = points.get((subject, t)), points.get((system, t))
            cells.append("-" if mine is None or theirs is None else f"{mine[0] / theirs[0]:.2f}x")
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def svg(title, unit, systems, points):
    """The plot: threads on a log2 x axis, rate on a log10 y axis, one polyline per system."""
    values = [p[0] for p in points.values()]
    low_decade = math.floor(math.log10(min(values)))
    high_decade = math.ceil(math.log10(max(values)))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(threads):
        return LEFT + plot_w * math.log2(threads) / math.log2(THREADS[-1])

    def y(value):
        share = (math.log10(value) - low_decade) / (high_decade - low_decade)
        return TOP + plot_h * (1 - share)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="{TOP - 16}" font-size="14" font-weight="bold">{title}</text>',
    ]
    for decade in range(low_decade, high_decade + 1):
        for step in (1, 2, 5):
            value = step * 10**decade
            if value > 10**high_decade:
                break
            major = step == 1
            out.append(
                f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
                f'stroke="{"#bbb" if major else "#e5e5e5"}"/>'
            )
            out.append(
                f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:,}</text>'
            )
    for t in THREADS:
        out.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{x(t):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{t}</text>')
    out.append(
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>'
    )
    out.append(
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 12}" text-anchor="middle">writer threads</text>'
    )
    out.append(
        f'<text transform="translate(18 {TOP + plot_h / 2}) rotate(-90)" text-anchor="middle">'
        f"{unit} per second (log scale)</text>"
    )
    for index, system in enumerate(systems):
        colour = COLOURS.get(system, OTHER_COLOURS[index % len(OTHER_COLOURS)])
        width = 3 if index == 0 else 1.6
        dash = ' stroke-dasharray="6 4"' if system.startswith("raw_") else ""
        line = [(x(t), y(points[(system, t)][0])) for t in THREADS if (system, t) in points]
        if not line:
            continue
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in line)
        out.append(
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="{width}"{dash}/>'
        )
        for px, py in line:
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{colour}"/>')
        legend_y = TOP + 10 + 20 * index
        out.append(
            f'<line x1="{LEFT + plot_w + 14}" x2="{LEFT + plot_w + 38}" y1="{legend_y}" '
            f'y2="{legend_y}" stroke="{colour}" stroke-width="{width}"{dash}/>'
        )
        out.append(f'<text x="{LEFT + plot_w + 44}" y="{legend_y + 4}">{system}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("group", help="criterion group, e.g. effect_protocol")
    parser.add_argument("output", type=pathlib.Path, help="SVG file to write")
    parser.add_argument("systems", nargs="+", help="systems to draw; the first is the subject")
    parser.add_argument("--criterion", type=pathlib.Path, default=pathlib.Path("target/criterion"))
    parser.add_argument("--title", help="plot title (default: the group)")
    parser.add_argument("--unit", default="protocols", help="what one element is")
    args = parser.parse_args()
    points = {}
    for system in args.systems:
        for t in THREADS:
            point = rate(args.criterion, args.group, system, t)
            if point is not None:
                points[(system, t)] = point
    if not points:
        sys.exit(f"no criterion estimates for {args.group} under {args.criterion}")
    args.output.write_text(svg(args.title or args.group, args.unit, args.systems, points))
    print(tables(args.group, args.systems, points))


if __name__ == "__main__":
    main()
