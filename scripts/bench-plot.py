#!/usr/bin/env python3
"""Draws scripts/bench-sweep.sh's JSON lines as an SVG: bandwidth (Gb/s) and message rate
(Mmsg/s) by message size, one line per tool, both axes logarithmic.

usage: scripts/bench-plot.py [--title TEXT] SWEEP.jsonl [OUT.svg]   (default docs/bench-sweep.svg)

Each line of the input is {"tool", "size", "gbit_per_second", "msg_rate_mpps"}, optionally with
"date", "machine" and "seconds" (the title uses them); lines without "tool" are skipped, and
several lines for the same tool and size are drawn as their median. Python 3 standard library
only: the SVG is written by hand.
"""

import argparse
import json
import math
import statistics
import sys
from html import escape

# tool -> colour, marker; tools not listed take the next spare colour
STYLES = {
    "rdma-container (tcp)": ("#1f4e9c", "circle"),
    "iperf3": ("#d9730d", "square"),
    "sockperf": ("#2a8a3e", "diamond"),
}
SPARE = ["#9b2c8c", "#7a5a12", "#444444", "#c23b22"]

WIDTH, HEIGHT = 1000, 470
PANEL_W, PANEL_H = 390, 300
PANEL_Y = 95
PANELS_X = (85, 575)


def size_label(n):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def num_label(v):
    if v >= 1:
        return f"{v:g}"
    return f"{v:.10f}".rstrip("0").rstrip(".")


def load(path):
    points = {}  # tool -> size -> [(gbit, mpps)]
    meta = {}
    order = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"bench-plot: {path}:{lineno}: not JSON: {e}")
            if not isinstance(rec, dict) or "tool" not in rec:
                continue
            tool = str(rec["tool"])
            try:
                size = int(rec["size"])
                gbit = float(rec["gbit_per_second"])
                mpps = float(rec["msg_rate_mpps"])
            except (KeyError, TypeError, ValueError) as e:
                sys.exit(f"bench-plot: {path}:{lineno}: missing or bad field: {e}")
            if tool not in points:
                points[tool] = {}
                order.append(tool)
            points[tool].setdefault(size, []).append((gbit, mpps))
            for key in ("date", "machine", "seconds"):
                if key in rec and key not in meta:
                    meta[key] = rec[key]
    if not points:
        sys.exit(f"bench-plot: {path}: no records")
    series = {}
    for tool in order:
        series[tool] = [
            (size, statistics.median(g for g, _ in runs), statistics.median(m for _, m in runs))
            for size, runs in sorted(points[tool].items())
        ]
    return series, meta


def log_ticks(lo, hi):
    """Tick values covering [lo, hi] on a log scale: decades, with 2 and 5 when few decades."""
    a = math.floor(math.log10(lo))
    b = math.ceil(math.log10(hi))
    if b == a:
        b += 1
    mults = (1, 2, 5) if b - a <= 3 else (1,)
    ticks = [m * 10.0**e for e in range(a, b + 1) for m in mults]
    # trim to the covering range: the last tick at or below lo, the first at or above hi
    below = [t for t in ticks if t <= lo * (1 + 1e-9)]
    above = [t for t in ticks if t >= hi * (1 - 1e-9)]
    start, end = max(below), min(above)
    return [t for t in ticks if start * (1 - 1e-9) <= t <= end * (1 + 1e-9)]


def panel(out, x0, title, ylabel, series, index, styles, sizes):
    y0 = PANEL_Y
    xs_lo, xs_hi = math.log2(min(sizes)), math.log2(max(sizes))
    if xs_hi == xs_lo:
        xs_lo, xs_hi = xs_lo - 1, xs_hi + 1
    values = [p[index] for pts in series.values() for p in pts if p[index] > 0]
    if not values:
        values = [1.0]
    yt = log_ticks(min(values), max(values))
    ly_lo, ly_hi = math.log10(yt[0]), math.log10(yt[-1])
    pad = 12

    def px(size):
        return x0 + pad + (math.log2(size) - xs_lo) / (xs_hi - xs_lo) * (PANEL_W - 2 * pad)

    def py(v):
        return y0 + PANEL_H - (math.log10(v) - ly_lo) / (ly_hi - ly_lo) * PANEL_H

    out.append(f'<text x="{x0 + PANEL_W / 2}" y="{y0 - 10}" class="ptitle">{escape(title)}</text>')
    out.append(f'<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" class="frame"/>')
    for t in yt:
        y = py(t)
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + PANEL_W}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" class="ytick">{num_label(t)}</text>')
    for s in sizes:
        x = px(s)
        out.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + PANEL_H}" class="grid"/>')
        out.append(
            f'<text x="{x:.1f}" y="{y0 + PANEL_H + 16}" class="xtick">{size_label(s)}</text>'
        )
    out.append(
        f'<text x="{x0 + PANEL_W / 2}" y="{y0 + PANEL_H + 38}" class="axis">'
        "message size (bytes, log scale)</text>"
    )
    cy = y0 + PANEL_H / 2
    out.append(
        f'<text x="{x0 - 52}" y="{cy}" class="axis" transform="rotate(-90 {x0 - 52} {cy})">'
        f"{escape(ylabel)}</text>"
    )
    for tool, pts in series.items():
        colour, marker = styles[tool]
        pts = [p for p in pts if p[index] > 0]
        if len(pts) > 1:
            path = " ".join(f"{px(p[0]):.1f},{py(p[index]):.1f}" for p in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for p in pts:
            x, y = px(p[0]), py(p[index])
            tip = f"{tool}, {size_label(p[0])}: {p[index]:.4g}"
            if marker == "square":
                shape = f'<rect x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7"'
            elif marker == "diamond":
                shape = (
                    f'<polygon points="{x:.1f},{y - 5:.1f} {x + 5:.1f},{y:.1f} '
                    f'{x:.1f},{y + 5:.1f} {x - 5:.1f},{y:.1f}"'
                )
            else:
                shape = f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.8"'
            out.append(f'{shape} fill="{colour}"><title>{escape(tip)}</title></{shape.split()[0][1:]}>')


DEFAULT_NOTE = (
    "iperf3 measures bandwidth (its message rate = writes/s = bandwidth / size); sockperf measures "
    "message rate (its bandwidth = rate \u00d7 size) and sends at most 65507 B"
)


def render(series, meta, title, note=DEFAULT_NOTE):
    styles = {}
    spare = iter(SPARE)
    for tool in series:
        styles[tool] = STYLES.get(tool) or (next(spare, "#000000"), "circle")
    sizes = sorted({p[0] for pts in series.values() for p in pts})
    if title is None:
        tools = list(series)
        title = tools[0]
        if len(tools) > 1:
            others = tools[1:]
            title += " vs " + (others[0] if len(others) == 1 else ", ".join(others[:-1]) + " and " + others[-1])
        title += " on 127.0.0.1"
    sub = []
    if "date" in meta:
        sub.append(str(meta["date"]))
    if "machine" in meta:
        sub.append(str(meta["machine"]))
    if "seconds" in meta:
        sub.append(f"one {meta['seconds']} s run per point")
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif">',
        "<style>"
        ".title{font-size:16px;font-weight:bold;text-anchor:middle}"
        ".sub{font-size:12px;fill:#444;text-anchor:middle}"
        ".ptitle{font-size:14px;font-weight:bold;text-anchor:middle}"
        ".frame{fill:none;stroke:#333;stroke-width:1}"
        ".grid{stroke:#ddd;stroke-width:1}"
        ".xtick{font-size:11px;text-anchor:middle}"
        ".ytick{font-size:11px;text-anchor:end}"
        ".axis{font-size:12px;text-anchor:middle}"
        ".legend{font-size:12px}"
        ".note{font-size:11px;fill:#555;text-anchor:middle}"
        "</style>",
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
        f'<text x="{WIDTH / 2}" y="24" class="title">{escape(title)}</text>',
    ]
    if sub:
        out.append(f'<text x="{WIDTH / 2}" y="44" class="sub">{escape(" | ".join(sub))}</text>')
    if note:
        out.append(f'<text x="{WIDTH / 2}" y="62" class="note">{escape(note)}</text>')
    panel(out, PANELS_X[0], "Bandwidth", "Gb/s (log scale)", series, 1, styles, sizes)
    panel(out, PANELS_X[1], "Message rate", "million messages/s (log scale)", series, 2, styles, sizes)
    # legend, centred under both panels
    ly = HEIGHT - 22
    item_w = [40 + 7.2 * len(t) for t in series]
    x = (WIDTH - sum(item_w)) / 2
    for tool, w in zip(series, item_w):
        colour, _ = styles[tool]
        out.append(f'<line x1="{x:.1f}" y1="{ly - 4}" x2="{x + 24:.1f}" y2="{ly - 4}" stroke="{colour}" stroke-width="3"/>')
        out.append(f'<text x="{x + 30:.1f}" y="{ly}" class="legend">{escape(tool)}</text>')
        x += w
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", help="JSON lines from scripts/bench-sweep.sh")
    ap.add_argument("output", nargs="?", default="docs/bench-sweep.svg")
    ap.add_argument("--title", help="the plot's title (default: the tools, on 127.0.0.1)")
    ap.add_argument("--note", default=DEFAULT_NOTE, help="a line under the title ('' for none)")
    args = ap.parse_args()
    series, meta = load(args.input)
    svg = render(series, meta, args.title, args.note)
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(svg)
    print(f"bench-plot: {args.output} ({sum(len(p) for p in series.values())} points, {len(series)} tools)")


if __name__ == "__main__":
    main()
