"""Charts of one `tidelog bench` run: `python3 plot.py MERGED.json OUTDIR`.

MERGED.json is `{"machine": {...}, "rows": [...]}`: the rows of the row contract (skipped and
planned rows are ignored) plus ceiling rows (`"kind": "ceiling"`, `"system"` naming the
ceiling), each optionally with `runs` (records/s of each round), `ratio_ceiling`,
`ceiling_name`, `ratio_best_peer` and `best_peer`. Writes into OUTDIR:

- append-D0.png, append-D1.png, append-D2.png, append-D2a.png: append MB/s per record size,
  one bar per (system, config, lang, threads), min-max of the rounds as whiskers, and that
  class's ceilings as black marks over each size group;
- read.png: the same for reads;
- ratios.png: every tidelog append row's ratio to its ceiling and to the best peer, against
  the targets 0.8 and 2.0.

Prints the paths written. Needs matplotlib; without it prints one line and exits 3.
"""

from __future__ import annotations

import json
import math
import os
import sys
import textwrap
from collections.abc import Iterable
from typing import Any

CLASS_TITLES = {
    "D0": "D0: nothing made durable per record or batch",
    "D1": "D1: durable per batch (1000 records or 4 MiB)",
    "D2": "D2: durable per record",
    "D2a": "D2a: durable per record, acknowledged asynchronously (pipelined)",
}
TARGET_CEILING = 0.8
TARGET_PEER = 2.0
TIMES = "\u00d7"  # the multiplication sign
# Peers keep one hue per system across charts; tidelog series take shades of blue.
PEER_COLOURS = {
    "file": "#7f7f7f",
    "sqlite3": "#b08d57",
    "lmdb": "#8fae3f",
    "rocksdict": "#e08a3c",
    "walrus": "#a97cc4",
}
OTHER_PEER_COLOURS = ["#c06c84", "#4fb3a9", "#b5b5b5", "#d4b84a", "#6b8e23"]
CEILING_STYLES = ["-", "--", ":", "-."]


def load_pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        sys.exit(3)
    return plt


def size_label(n: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def series_key(row: dict[str, Any]) -> tuple[str, str, str, int]:
    return (row["system"], row["config"], row["lang"], int(row["threads"]))


def series_label(key: tuple[str, str, str, int]) -> str:
    system, config, lang, threads = key
    return f"{system} ({lang}, {threads} thr): {config}"


def machine_line(machine: dict[str, Any]) -> str:
    text = "; ".join(f"{k}: {v}" for k, v in machine.items())
    return "\n".join(textwrap.wrap(text, 160)[:2])


def short_number(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}" if v >= 1 else f"{v:.2g}"


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_mb(row: dict[str, Any]) -> list[float]:
    runs = row.get("runs") or []
    return [r * row["record_bytes"] / 1e6 for r in runs if r]


def colours(keys: list[tuple[str, str, str, int]], plt: Any) -> dict[Any, Any]:
    """tidelog series: shades of blue; a peer: its system's hue, lighter per extra series."""
    out: dict[Any, Any] = {}
    tidelog = [k for k in keys if k[0] == "tidelog"]
    blues = plt.get_cmap("Blues")
    for i, key in enumerate(tidelog):
        out[key] = blues(0.45 + 0.5 * (i / max(1, len(tidelog) - 1)))
    by_system: dict[str, list[Any]] = {}
    for key in keys:
        if key[0] != "tidelog":
            by_system.setdefault(key[0], []).append(key)
    spare = iter(OTHER_PEER_COLOURS * 4)
    for system, members in by_system.items():
        base = PEER_COLOURS.get(system) or next(spare)
        rgb = plt.matplotlib.colors.to_rgb(base)
        for i, key in enumerate(members):
            mix = 0.55 * i / max(1, len(members))  # towards white
            out[key] = tuple(c + (1 - c) * mix for c in rgb)
    return out


def order(keys: Iterable[tuple[str, str, str, int]]) -> list[tuple[str, str, str, int]]:
    # tidelog first (rust, then python), then peers by system.
    return sorted(set(keys), key=lambda k: (k[0] != "tidelog", k[0], k[2] != "rust", k[1], k[3]))


def no_rows(plt: Any, path: str, title: str) -> str:
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.set_axis_off()
    ax.text(0.5, 0.5, "no rows of this kind in this run", ha="center", va="center", fontsize=12)
    ax.set_title(title)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def bars(
    plt: Any,
    path: str,
    title: str,
    rows: list[dict[str, Any]],
    ceilings: list[dict[str, Any]],
    machine: dict[str, Any],
) -> str:
    if not rows:
        return no_rows(plt, path, title)
    sizes = sorted({int(r["record_bytes"]) for r in rows})
    keys = order(series_key(r) for r in rows)
    colour = colours(keys, plt)
    by_cell = {(series_key(r), int(r["record_bytes"])): r for r in rows}
    n = len(keys)
    group = 0.84
    width = group / n
    fig_w = max(10.0, 2.0 + len(sizes) * (0.24 * n + 0.7))
    legend_rows = (n + 1) // 2 + (len(ceilings) > 0)
    fig, ax = plt.subplots(figsize=(fig_w, 6.5 + 0.22 * legend_rows), layout="constrained")
    values: list[float] = []
    handles = []
    for i, key in enumerate(keys):
        xs, ys, lo, hi, tops = [], [], [], [], []
        for g, size in enumerate(sizes):
            row = by_cell.get((key, size))
            if row is None or not row.get("mb_per_s"):
                continue
            y = float(row["mb_per_s"])
            runs = run_mb(row) or [y]
            xs.append(g - group / 2 + width * (i + 0.5))
            ys.append(y)
            lo.append(max(0.0, y - min(runs)))
            hi.append(max(0.0, max(runs) - y))
            values.extend([y, *runs])
            tops.append(max(y, *runs))
        bar = ax.bar(
            xs,
            ys,
            width=width * 0.92,
            color=[colour[key]] * len(xs),
            edgecolor="black" if key[0] == "tidelog" else "none",
            linewidth=0.4,
            label=series_label(key),
        )
        if any(lo) or any(hi):
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor="#333333", lw=0.8, capsize=1.5)
        for x, top, y in zip(xs, tops, ys, strict=True):
            ax.text(
                x,
                top * 1.08,
                short_number(y),
                rotation=90,
                ha="center",
                va="bottom",
                fontsize=6.5,
                color="#333333",
                # Readable where a ceiling mark crosses the label.
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.3, "alpha": 0.9},
                zorder=5,
            )
        handles.append(bar)
    names = list(dict.fromkeys(c["system"] for c in ceilings))
    for c in ceilings:
        y = c.get("mb_per_s")
        if not y:
            continue
        style = CEILING_STYLES[names.index(c["system"]) % len(CEILING_STYLES)]
        size = c.get("record_bytes")
        if size is not None and int(size) not in sizes:
            continue
        # A ceiling without a record size holds for every size group.
        groups = range(len(sizes)) if size is None else [sizes.index(int(size))]
        for g in groups:
            ax.hlines(y, g - group / 2, g + group / 2, colors="black", linestyles=style, lw=2.0)
        values.append(float(y))
    for j, name in enumerate(names):
        style = CEILING_STYLES[j % len(CEILING_STYLES)]
        (line,) = ax.plot([], [], color="black", linestyle=style, lw=2.0, label=f"ceiling: {name}")
        handles.append(line)
    ax.set_yscale("log")
    positive = [v for v in values if v > 0]
    if positive:
        ax.set_ylim(min(positive) / 2, max(positive) * 4)
    ax.set_xticks(range(len(sizes)), [size_label(s) for s in sizes])
    ax.set_xlim(-0.6, len(sizes) - 0.4)
    ax.set_xlabel("record size")
    ax.set_ylabel("payload throughput, MB/s (1 MB = 10⁶ bytes; log scale)")
    ax.grid(axis="y", which="major", alpha=0.5)
    ax.grid(axis="y", which="minor", alpha=0.15)
    ax.set_title(title, fontsize=13)
    if machine:
        fig.suptitle(machine_line(machine), fontsize=7, color="#555555")
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncol=2,
        fontsize=8,
        frameon=False,
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def ratio_label(row: dict[str, Any]) -> str:
    return (
        f"[{row['class']} {row['lang']}] {row['config']}, {row['threads']} thr, "
        f"{size_label(int(row['record_bytes']))}"
    )


def ratios(plt: Any, path: str, rows: list[dict[str, Any]], machine: dict[str, Any]) -> str:
    title = "tidelog append: ratio to the ceiling and to the best peer of the same class"
    rows = [
        r
        for r in rows
        if r.get("ratio_ceiling") is not None or r.get("ratio_best_peer") is not None
    ]
    if not rows:
        return no_rows(plt, path, title)
    rows.sort(key=lambda r: (r["class"], r["lang"], r["config"], r["threads"], r["record_bytes"]))
    n = len(rows)
    fig, ax = plt.subplots(figsize=(13, 1.6 + 0.42 * n), layout="constrained")
    h = 0.38
    ceiling_colour = "#2b6cb0"
    peer_colour = "#e08a3c"
    values = [TARGET_CEILING, TARGET_PEER]
    for i, row in enumerate(rows):
        for offset, ratio, name, colour in (
            (-h / 2, row.get("ratio_ceiling"), row.get("ceiling_name"), ceiling_colour),
            (h / 2, row.get("ratio_best_peer"), row.get("best_peer"), peer_colour),
        ):
            if ratio is None or ratio <= 0:
                where = ax.get_yaxis_transform()  # x in axes units: the left edge
                ax.text(0, i + offset, " n/a", va="center", fontsize=7, transform=where)
                continue
            ax.barh(i + offset, ratio, height=h * 0.9, color=colour)
            label = f" {ratio:.2f}{TIMES} {shorten(name or '', 56)}"
            ax.text(ratio, i + offset, label, va="center", fontsize=7)
            values.append(float(ratio))
    ax.axvline(TARGET_CEILING, color=ceiling_colour, linestyle="--", lw=1.2)
    ax.axvline(TARGET_PEER, color=peer_colour, linestyle="--", lw=1.2)
    ax.set_xscale("log")
    # Leave the right third of the axis (in log space) for the labels past the longest bar.
    low = math.log10(min(values) / 1.5)
    high = math.log10(max(values))
    ax.set_xlim(10**low, 10 ** ((high - low / 3) / (2 / 3)))
    ax.set_yticks(range(n), [ratio_label(r) for r in rows], fontsize=8)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel("ratio (log scale): tidelog MB/s ÷ ceiling MB/s, tidelog MB/s ÷ best peer MB/s")
    ax.grid(axis="x", which="both", alpha=0.25)
    ax.set_title(title, fontsize=13)
    if machine:
        fig.suptitle(machine_line(machine), fontsize=7, color="#555555")
    proxies = [
        plt.Rectangle((0, 0), 1, 1, color=ceiling_colour),
        plt.Rectangle((0, 0), 1, 1, color=peer_colour),
        plt.Line2D([], [], color=ceiling_colour, linestyle="--"),
        plt.Line2D([], [], color=peer_colour, linestyle="--"),
    ]
    fig.legend(
        proxies,
        [
            "ratio to ceiling",
            "ratio to best peer (same class)",
            f"target: {TARGET_CEILING}{TIMES} ceiling",
            f"target: {TARGET_PEER}{TIMES} best peer",
        ],
        loc="outside lower center",
        ncol=4,
        fontsize=8,
        frameon=False,
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python3 plot.py MERGED.json OUTDIR", file=sys.stderr)
        return 2
    plt = load_pyplot()
    try:
        with open(argv[1], encoding="utf-8") as f:
            merged = json.load(f)
        rows_in = merged["rows"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        print(f"plot.py: cannot read {argv[1]}: {err}", file=sys.stderr)
        return 2
    machine = merged.get("machine") or {}
    outdir = argv[2]
    os.makedirs(outdir, exist_ok=True)
    rows = [
        r
        for r in rows_in
        if isinstance(r, dict) and not r.get("skipped") and not r.get("planned") and "op" in r
    ]
    measured = [r for r in rows if r.get("kind") != "ceiling"]
    ceilings = [r for r in rows if r.get("kind") == "ceiling"]
    written = []
    for cls, title in CLASS_TITLES.items():
        written.append(
            bars(
                plt,
                os.path.join(outdir, f"append-{cls}.png"),
                f"Append throughput, {title}",
                [r for r in measured if r["op"] == "append" and r.get("class") == cls],
                [c for c in ceilings if c["op"] == "append" and c.get("class") in (cls, None)],
                machine,
            )
        )
    written.append(
        bars(
            plt,
            os.path.join(outdir, "read.png"),
            "Sequential read throughput (hot page cache)",
            [r for r in measured if r["op"] == "read"],
            [c for c in ceilings if c["op"] == "read"],
            machine,
        )
    )
    written.append(
        ratios(
            plt,
            os.path.join(outdir, "ratios.png"),
            [r for r in measured if r.get("kind") == "tidelog" and r["op"] == "append"],
            machine,
        )
    )
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
