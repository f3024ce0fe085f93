"""Render docs/benchmarks.md and its plots from a results file written by ``python -m benchmarks``.

    python -m benchmarks.report [RESULTS.json] [--docs docs/benchmarks.md] [--img-dir docs/img]

Without RESULTS, the newest benchmarks/results/routes-*.json is used. Everything in the markdown
comes from that file, and the Spark section from benchmarks/results/spark.json (``python -m
benchmarks.spark``) when it is there: rerun the benchmarks rather than editing the output.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.ab_compare import from_json, markdown_table
from benchmarks.common import RESULTS, ROOT
from benchmarks.explanations import what_is_left
from benchmarks.stream_report import load_streams, section_streams
from benchmarks.suite import PROFILE_BYTES
from benchmarks.variants import CEILING, LABELS, LATENCY_VARIANTS, PASSTHROUGH_READERS, PASSTHROUGH_WRITERS

PROFILE_MB = PROFILE_BYTES // 1_000_000

DOCS = ROOT / "docs" / "benchmarks.md"
IMG = ROOT / "docs" / "img"

COLORS = {
    "raw.record": "#444444",
    "raw.segments": "#1f77b4",
    "chunked": "#1f77b4",
    "redis.raw": "#d62728",
    "redis.raw+env": "#d62728",
    "redis": "#d62728",
    "s3.raw": "#2ca02c",
    "s3.raw+env": "#2ca02c",
    "s3": "#2ca02c",
}
STYLES = {
    "raw.record": ":",
    "raw.segments": "--",
    "chunked": "-",
    "redis.raw": "-.",
    "redis.raw+env": "--",
    "redis": "-",
    "s3.raw": "-.",
    "s3.raw+env": "--",
    "s3": "-",
}
ROUTE_NAMES = {"raw.record": "raw, one record", "chunked": "chunked", "redis": "Redis reference", "s3": "S3 reference"}
FAMILIES = {
    "chunked": ("chunked", "raw.segments", "raw.record"),
    "redis": ("redis", "redis.raw+env", "redis.raw", "raw.record"),
    "s3": ("s3", "s3.raw+env", "s3.raw", "raw.record"),
}


# -- formatting --------------------------------------------------------------------------------


def _num(x: float | None, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if abs(x) >= 100:
        text = f"{x:,.0f}"
    elif abs(x) >= 10:
        text = f"{x:.1f}"
    elif abs(x) >= 1:
        text = f"{x:.2f}"
    else:
        text = f"{x:.3f}"
    return text + unit


def _cell(s: dict[str, Any] | None, unit: str = "", fmt: Any = None) -> str:
    """``median (min-max)``."""
    if not s or not s.get("samples"):
        return "-"
    f = fmt or _num
    return f"{f(s['median'])}{unit} ({f(s['min'])}-{f(s['max'])})"


def _per_byte(x: float) -> str:
    """Bytes per payload byte: small ratios in scientific notation, so 0.0001 does not read as 0."""
    return f"{x:.1e}" if 0 < x < 0.01 else _num(x)


def _mb(n: float) -> str:
    return _num(n / 1e6)


def _ratio(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def backend_line(data: dict[str, Any]) -> str:
    env = data["env"]
    return f"*Measured on Kafka **{env['kafka']}** · {env['redis']} · {env['s3']} · {data['mode']} mode*"


# -- plots -------------------------------------------------------------------------------------


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _log_axis(ax: Any, axis: str = "y") -> None:
    """Log scale with plain numbers at 1-2-5 steps instead of 2x10^2."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    target = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(NullFormatter())


def _errbar(ax: Any, xs: list[float], stats: list[dict[str, Any]], variant: str, label: str) -> None:
    med = [s["median"] for s in stats]
    lo = [max(0.0, s["median"] - s["min"]) for s in stats]
    hi = [max(0.0, s["max"] - s["median"]) for s in stats]
    ax.errorbar(
        xs,
        med,
        yerr=[lo, hi],
        label=label,
        color=COLORS.get(variant),
        linestyle=STYLES.get(variant, "-"),
        marker="o",
        capsize=3,
        linewidth=2.2 if variant in ("chunked", "redis", "s3") else 1.3,
    )


def plot_throughput(data: dict[str, Any], path: Path) -> None:
    plt = _plt()
    sizes = data["sizes"]
    xs = [c["size"] / 1e6 for c in sizes]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5), sharex=True)
    for col, (route, family) in enumerate(FAMILIES.items()):
        for row, side in enumerate(("produce", "consume")):
            ax = axes[row][col]
            for v in family:
                _errbar(ax, xs, [c[side][v] for c in sizes], v, LABELS[v])
            _log_axis(ax, "x")
            _log_axis(ax, "y")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title(f"{ROUTE_NAMES[route]}: {side}")
            if col == 0:
                ax.set_ylabel("MB/s (payload, median, min-max)")
            if row == 1:
                ax.set_xlabel("payload size (MB)")
            ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(
        f"Throughput by payload size — Kafka {data['env']['kafka']}, {data['env']['redis']}, "
        f"{data['env']['s3']} ({data['mode']} mode)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_ratio(data: dict[str, Any], path: Path) -> None:
    plt = _plt()
    sizes = data["sizes"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    width = 0.8 / len(CEILING)
    for ax, side in zip(axes, ("produce", "consume"), strict=True):
        for i, route in enumerate(CEILING):
            vals = [c["ratios"][route][side] for c in sizes]
            spread = [c.get("ratio_stats", {}).get(route, {}).get(side) for c in sizes]
            err = [
                [max(0.0, v - (st["min"] if st else v)) for v, st in zip(vals, spread, strict=True)],
                [max(0.0, (st["max"] if st else v) - v) for v, st in zip(vals, spread, strict=True)],
            ]
            pos = [j + (i - (len(CEILING) - 1) / 2) * width for j in range(len(sizes))]
            bars = ax.bar(
                pos,
                vals,
                width,
                yerr=err,
                capsize=3,
                label=f"{route} / {CEILING[route]}",
                color=COLORS[route],
                alpha=0.85,
                hatch=("" if route == "chunked" else ("//" if route == "redis" else "..")),
            )
            for b, v in zip(bars, vals, strict=True):
                ax.annotate(
                    f"{v:.2f}",
                    (b.get_x() + b.get_width() / 2, 0.02),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    color="white",
                    fontweight="bold",
                )
        ax.axhline(0.9, color="black", linestyle="--", linewidth=1)
        ax.text(len(sizes) - 0.5, 0.91, "target 0.9", ha="right", va="bottom", fontsize=8)
        ax.set_xticks(range(len(sizes)), [c["label"] for c in sizes])
        ax.set_title(f"{side}: route MB/s ÷ ceiling MB/s (median of repetitions, min-max)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("ratio")
    fig.suptitle(f"Each route against its ceiling — Kafka {data['env']['kafka']} ({data['mode']} mode)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_latency(data: dict[str, Any], path: Path) -> None:
    plt = _plt()
    rows = data["latency"]
    xs = [r["size"] / 1e6 for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    for ax, key, title in ((axes[0], "p50_ms", "p50"), (axes[1], "p99_ms", "p99")):
        for v in LATENCY_VARIANTS:
            _errbar(ax, xs, [r[key][v] for r in rows], v, LABELS[v])
        _log_axis(ax, "x")
        _log_axis(ax, "y")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xlabel("payload size (MB)")
        ax.set_title(f"end-to-end latency {title} (produce call → whole message polled)")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("ms (median over repetitions, min-max)")
    fig.suptitle(f"Latency by payload size — Kafka {data['env']['kafka']} ({data['mode']} mode)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_mixes(data: dict[str, Any], path: Path) -> None:
    plt = _plt()
    mixes = data["mixes"]
    variants = list(mixes[0]["kafka_bytes"]) if mixes else []
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    width = 0.8 / max(1, len(variants))
    for i, v in enumerate(variants):
        pos = [j + (i - (len(variants) - 1) / 2) * width for j in range(len(mixes))]
        kafka = [m["kafka_bytes"][v] / m["bytes"] for m in mixes]
        bars = axes[0].bar(pos, kafka, width, label=ROUTE_NAMES.get(v, v), color=COLORS.get(v), alpha=0.85)
        for b, m in zip(bars, mixes, strict=True):
            axes[0].annotate(
                _bytes(m["kafka_bytes"][v]),
                (b.get_x() + b.get_width() / 2, b.get_height() * 1.1),
                ha="center",
                va="bottom",
                fontsize=7,
                rotation=90,
            )
        stats = [m["consume"][v] for m in mixes]
        med = [s["median"] for s in stats]
        err = [[max(0.0, s["median"] - s["min"]) for s in stats], [max(0.0, s["max"] - s["median"]) for s in stats]]
        axes[1].bar(pos, med, width, yerr=err, capsize=3, label=ROUTE_NAMES.get(v, v), color=COLORS.get(v), alpha=0.85)
    _log_axis(axes[0], "y")
    axes[0].set_ylim(top=30)
    axes[0].set_ylabel("Kafka bytes written / payload bytes (log)")
    axes[0].set_title("bytes through the broker (labels: Kafka bytes written)")
    axes[1].set_ylabel("consumer MB/s (median, min-max)")
    axes[1].set_title("consumer throughput")
    for ax in axes:
        ax.set_xticks(range(len(mixes)), [f"{m['name']}\n({m['messages']} msgs)" for m in mixes])
        ax.grid(True, axis="y", alpha=0.3)
        if variants:
            ax.legend(fontsize=8, loc="upper left" if ax is axes[1] else "center right", ncol=2 if ax is axes[1] else 1)
    if mixes and variants:
        top = max(m["consume"][v]["max"] for m in mixes for v in variants)
        axes[1].set_ylim(0, top * 1.3)
    if mixes:
        m0 = mixes[0]
        fig.suptitle(
            f"Sporadic large messages ({m0['small_size'] / 1e3:g} KB small, {m0['large_size'] / 1e6:g} MB "
            f"large) - Kafka {data['env']['kafka']} ({data['mode']} mode)"
        )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _bytes(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.3g} MB"
    if n >= 1e3:
        return f"{n / 1e3:.3g} KB"
    return f"{n:.0f} B"


def make_plots(data: dict[str, Any], img_dir: Path) -> dict[str, Path]:
    img_dir.mkdir(parents=True, exist_ok=True)
    plots = {
        "throughput": (plot_throughput, img_dir / "bench-throughput.png"),
        "ratio": (plot_ratio, img_dir / "bench-ratio.png"),
        "latency": (plot_latency, img_dir / "bench-latency.png"),
        "mixes": (plot_mixes, img_dir / "bench-mixes.png"),
    }
    for fn, path in plots.values():
        fn(data, path)
    return {name: path for name, (_, path) in plots.items()}


# -- markdown ----------------------------------------------------------------------------------


def _rel(path: Path, docs: Path) -> str:
    try:
        return str(path.resolve().relative_to(docs.resolve().parent))
    except ValueError:
        return str(path)


def section_targets(data: dict[str, Any]) -> str:
    rows = []
    for t in data["targets"]:
        rows.append(
            [
                t["id"],
                t["case"],
                _ratio(t["ratio"]),
                f"{'≤' if t.get('at_most') else '≥'} {t['threshold']}",
                "met" if t["met"] else "**missed**",
            ]
        )
    missed = sorted({t["id"] for t in data["targets"] if not t["met"]})
    text = [
        "## Targets",
        "",
        "Reported, never asserted. A route's ratio is the median over repetitions of its MB/s divided by its "
        "ceiling's MB/s in the same repetition (ceilings: `raw.segments` for chunking, `redis.raw+env` for the "
        "Redis route, `s3.raw+env` for the S3 route); passthrough is the median messages/s of `HybridConsumer` "
        "divided by that of a raw `Consumer` reading the same topic the same way. Memory targets are the other way "
        "round, lower is better: the median peak RSS growth of a route's consumer minus that of the raw-segments "
        "consumer (of its producer minus raw `produce` of the same bytes), divided by the message size, so 1.0 is "
        "one whole extra copy of each message held at the peak; from 10 MB up, since smaller cells hold many "
        "messages at once.",
        "",
        backend_line(data),
        "",
        _table(["target", "case", "ratio", "threshold", "result"], rows),
        "",
    ]
    if missed:
        text.append(
            f"Missed: {', '.join(f'`{m}`' for m in missed)}. The worst case of each was run again under "
            "cProfile; see [Where the time goes](#where-the-time-goes-profiles-of-missed-targets)."
        )
        left = what_is_left(missed)
        if left:
            text += ["", "What is left of each missed target, measured apart from this run:", "", *left]
    else:
        text.append("Every target was met.")
    return "\n".join(text)


def _per_size(data: dict[str, Any], side: str, variant: str) -> str:
    return " / ".join(_num(c[side][variant]["median"]) for c in data["sizes"])


def section_which(data: dict[str, Any]) -> str:
    sizes = data["sizes"]
    labels = " / ".join(c["label"] for c in sizes)
    routes = ("raw.record", "chunked", "redis", "s3")
    big = sizes[-1]
    lat = {r["size"]: r for r in data["latency"]}

    def moved(c: dict[str, Any], v: str) -> int:
        return int(c.get("variant_bytes", {}).get(v, c["bytes"]))

    def kafka_ratio(v: str) -> str:
        return " / ".join(_per_byte(c["kafka_bytes"][v] / moved(c, v)) for c in sizes)

    def store_ratio(v: str) -> str:
        return " / ".join(_num(c["store_bytes"][v] / moved(c, v)) for c in sizes)

    def p99(v: str) -> str:
        return " / ".join(_num(lat[c["size"]]["p99_ms"][v]["median"]) if c["size"] in lat else "-" for c in sizes)

    mix_small = data["mixes"][0] if data["mixes"] else None
    servers = {"raw.record": "1 (Kafka)", "chunked": "1 (Kafka)", "redis": "2 (Kafka + Redis)", "s3": "2 (Kafka + S3)"}
    settings = {
        "raw.record": "5: producer `message.max.bytes`; consumer `fetch.max.bytes`, `max.partition.fetch.bytes`, "
        "`receive.message.max.bytes`; topic `max.message.bytes` (a real cluster also needs broker "
        "`message.max.bytes`, `replica.fetch.max.bytes`, `socket.request.max.bytes` ≥ the record)",
        "chunked": "0 beyond the gateway's own (`max.message.segment.bytes` 800 000 under the default 1 MB limit; "
        "consumer `message.assembler.buffer.capacity` ≥ the largest message)",
        "redis": "0 Kafka limits; a Redis server, its memory and TTL (`ttl_from_retention`)",
        "s3": "0 Kafka limits; a bucket, credentials and a lifecycle rule (`ensure_expiry_rule`)",
    }
    cleanup = {
        "raw.record": "nothing outside Kafka; retention deletes the records",
        "chunked": "nothing outside Kafka; consumers drop incomplete messages by offset gap "
        "(`message.assembler.expiration.offset.gap`, 1000) or buffer eviction",
        "redis": "producer deletes the payload when Kafka refuses the envelope (rollback); crash leftovers stay in "
        "the pending journal for `gateway gc`; payloads expire by TTL ≥ topic retention",
        "s3": "same rollback + pending markers + `gateway gc`; payloads expire by bucket lifecycle rule; "
        "aborted multipart uploads by the same rule",
    }
    rows: list[list[str]] = [
        ["servers needed (started by this benchmark)"] + [servers[r] for r in routes],
        ["settings changed from defaults"] + [settings[r] for r in routes],
        [f"Kafka bytes per payload byte ({labels})"] + [kafka_ratio(r) for r in routes],
        [f"store bytes per payload byte ({labels})", "0", "0", store_ratio("redis"), store_ratio("s3")],
        [f"producer MB/s ({labels})"] + [_per_size(data, "produce", r) for r in routes],
        [f"consumer MB/s ({labels})"] + [_per_size(data, "consume", r) for r in routes],
        [f"p99 latency ms ({labels})"] + [p99(r) for r in routes],
        [f"consumer peak RSS growth at {big['label']} (MB)"] + [_num(big["memory"][r]["median"] / 1e6) for r in routes],
    ]
    if mix_small is not None:
        rows.append(
            [f"mix {mix_small['name']}: Kafka MB / consumer MB/s"]
            + [f"{_mb(mix_small['kafka_bytes'][r])} / {_num(mix_small['consume'][r]['median'])}" for r in routes]
        )
    rows.append(["cleanup story (from the code)"] + [cleanup[r] for r in routes])

    # Verdicts computed from the numbers, not argued.
    verdicts = []
    for c in sizes:
        best_p = max(routes, key=lambda r: c["produce"][r]["median"])
        best_c = max(routes, key=lambda r: c["consume"][r]["median"])
        line = (
            f"- **{c['label']}**: fastest producer {ROUTE_NAMES[best_p]} "
            f"({_num(c['produce'][best_p]['median'])} MB/s), fastest consumer {ROUTE_NAMES[best_c]} "
            f"({_num(c['consume'][best_c]['median'])} MB/s)"
        )
        if c["size"] in lat:
            cell = lat[c["size"]]["p99_ms"]
            best_l = min(routes, key=lambda r: cell[r]["median"])
            line += f"; lowest p99 {ROUTE_NAMES[best_l]} ({_num(cell[best_l]['median'])} ms)"
        verdicts.append(line + ".")
    return "\n".join(
        [
            "## Which route when (measured)",
            "",
            "This table replaces the argued comparisons (LinkedIn's large-message talk: chunking vs. a reference "
            "store; Workday's Kafka-over-Redis article) with what this run measured. Every figure is the median of the "
            "repetitions; per-size figures are listed in size order.",
            "",
            backend_line(data),
            "",
            _table(["", *(ROUTE_NAMES[r] for r in routes)], rows),
            "",
            "From these numbers:",
            "",
            *verdicts,
            "",
            "Kafka bytes count record values and keys (headers, batch framing and replication are not included). "
            '"raw, one record" works here only because the benchmark broker enforces no size limit; a stock '
            "broker refuses records over about 1 MB.",
        ]
    )


def section_throughput(data: dict[str, Any], img: str) -> str:
    out = [
        "## Throughput by size",
        "",
        "Payload MB/s (10^6 bytes/s), median of the repetitions with (min-max). Produce ends when every record "
        "is acknowledged (`flush`); consume ends when the last message is back in the application.",
        "",
        backend_line(data),
        "",
        f"![throughput by size]({img})",
        "",
    ]
    variants = list(data["sizes"][0]["produce"])
    s3_counts = {c["label"]: c.get("variant_messages", {}).get("s3", c["messages"]) for c in data["sizes"]}
    if any(n != c["messages"] for c, n in zip(data["sizes"], s3_counts.values(), strict=True)):
        out += [
            "The S3 variants (`s3.raw`, `s3.raw+env`, `s3`) move only the first "
            + ", ".join(f"{n} ({k})" for k, n in s3_counts.items())
            + " of each cell's payloads: moto answers every request in about 10 ms, and the S3 route makes "
            "three requests per message.",
            "",
        ]
    for side in ("produce", "consume"):
        header = ["variant", *(f"{c['label']} x{c['messages']}" for c in data["sizes"])]
        rows = [[f"`{v}` {LABELS[v]}", *(_cell(c[side][v]) for c in data["sizes"])] for v in variants]
        out += [f"### {side.capitalize()} MB/s", "", backend_line(data), "", _table(header, rows), ""]
    return "\n".join(out)


def _ratio_cell(c: dict[str, Any], route: str, side: str) -> str:
    stats = c.get("ratio_stats", {}).get(route, {}).get(side)
    return _cell(stats, fmt=_ratio) if stats else _ratio(c["ratios"][route][side])


def section_ratio(data: dict[str, Any], img: str) -> str:
    rows = []
    for route, base in CEILING.items():
        for side in ("produce", "consume"):
            rows.append([f"`{route}` ÷ `{base}`", side, *(_ratio_cell(c, route, side) for c in data["sizes"])])
    return "\n".join(
        [
            "## Each route against its ceiling",
            "",
            "A route and its ceiling run back to back in every repetition; the ratio is the median of the "
            "per-repetition ratios, with their (min-max), which cancels whatever slowed a whole repetition down. "
            "`raw.segments` is raw confluent-kafka sending the very segment records the chunked "
            "route writes, pre-built before the clock starts, and a raw consumer that reads them without "
            "reassembly. `redis.raw+env` / `s3.raw+env` write the payload with a bare redis-py `SET` / boto3 "
            "`put_object` and then produce an envelope-sized record; their consumers read the record and `GET` the "
            "payload one at a time. The gateway additionally hashes (BLAKE3 in the envelope; the S3 store also "
            "records a SHA-256 in the object's metadata), "
            "journals the write as pending (Redis: in the same MULTI/EXEC as the payload; S3: one batch marker "
            "object per 64 writes), clears the mark on acknowledgement, and on the consumer fetches ahead in 4 "
            "threads and verifies. The gateway's Redis producer runs with `reference.write.window=8`: up to 8 "
            "writes in flight on one connection, each envelope produced once its write is confirmed, where the "
            "baseline waits for each `SET` (the default window of 1 waits too).",
            "",
            backend_line(data),
            "",
            f"![ratio to ceiling]({img})",
            "",
            _table(["route ÷ ceiling", "side", *(c["label"] for c in data["sizes"])], rows),
            "",
        ]
    )


def section_latency(data: dict[str, Any], img: str) -> str:
    rows = []
    for r in data["latency"]:
        for v in LATENCY_VARIANTS:
            rows.append([r["label"], f"`{v}`", _cell(r["p50_ms"][v]), _cell(r["p99_ms"][v]), str(r["round_trips"])])
    return "\n".join(
        [
            "## End-to-end latency",
            "",
            "From the `produce()` call until `poll()` hands the whole message back. Producer and consumer run in "
            "one process and one thread, in lock step: send one message, then poll (and serve the producer's "
            "delivery reports) until it is back, then send the next. So this is latency without queueing; "
            "`linger.ms=0` on every producer. p50/p99 are taken per repetition over its round trips (nearest rank, "
            "so with few round trips p99 is the slowest one), then the median over repetitions is shown with "
            "(min-max).",
            "",
            backend_line(data),
            "",
            f"![latency by size]({img})",
            "",
            _table(["size", "variant", "p50 ms", "p99 ms", "round trips / rep"], rows),
            "",
        ]
    )


def section_mixes(data: dict[str, Any], img: str) -> str:
    if not data["mixes"]:
        return ""
    m0 = data["mixes"][0]
    rows = []
    for m in data["mixes"]:
        for v in m["kafka_bytes"]:
            rows.append(
                [
                    f"{m['name']} ({m['messages']} msgs, {_mb(m['bytes'])} MB)",
                    ROUTE_NAMES.get(v, v),
                    _mb(m["kafka_bytes"][v]),
                    _per_byte(m["kafka_bytes"][v] / m["bytes"]),
                    _mb(m["store_bytes"][v]),
                    _cell(m["produce"][v]),
                    _cell(m["consume"][v]),
                    _num(m["memory"][v]["median"] / 1e6),
                ]
            )
    return "\n".join(
        [
            "## Sporadic large messages",
            "",
            f"Mixes of {m0['small_size'] / 1e3:g} KB and {m0['large_size'] / 1e6:g} MB messages; each mix holds "
            f"{m0['large']} large messages at fixed, seeded positions and as many small ones as the share needs. "
            "The gateway producers use their size policy here (no forced route): plain up to the 800 000-byte "
            "segment size, above it chunked (`chunked`) or a reference (`redis`, `s3`).",
            "",
            backend_line(data),
            "",
            f"![broker bytes by mix]({img})",
            "",
            _table(
                [
                    "mix",
                    "route",
                    "Kafka MB",
                    "Kafka bytes / payload byte",
                    "store MB",
                    "produce MB/s",
                    "consume MB/s",
                    "consumer peak RSS growth MB",
                ],
                rows,
            ),
            "",
        ]
    )


def _memory_rows(data: dict[str, Any], field: str) -> list[list[str]]:
    variants = list(data["sizes"][0].get(field, {}))
    return [
        [
            f"`{v}`",
            *(
                _cell({k: (x / 1e6 if isinstance(x, float) else [y / 1e6 for y in x]) for k, x in c[field][v].items()})
                for c in data["sizes"]
            ),
        ]
        for v in variants
    ]


def section_memory(data: dict[str, Any]) -> str:
    labels = [c["label"] for c in data["sizes"]]
    text = [
        "## Consumer memory",
        "",
        f"MB; {data['env']['memory_method']}. Each figure is the median of the passes with (min-max). The "
        "store-only baselines are left out: they hold one payload at a time. librdkafka prefetches up to "
        "`queued.max.messages.kbytes` (64 MiB by default) for every Kafka consumer, so a consumer that reads a "
        "whole small topic may hold all of it.",
        "",
        backend_line(data),
        "",
        _table(["consumer", *labels], _memory_rows(data, "memory")),
        "",
    ]
    producer = _memory_rows(data, "producer_memory")
    if producer:
        text += [
            "## Producer memory",
            "",
            "MB, measured the same way while each variant sends the cell's payloads to a fresh topic and flushes: "
            "`raw.record` is a raw `Producer` sending the same bytes as one record each (limits raised), which "
            "already holds librdkafka's own copy of what is in flight; what a route adds to that is its cost. "
            "`raw.segments` is a raw `Producer` sending the chunked route's segment records, built beforehand: "
            "what librdkafka holds for those records whoever sends them.",
            "",
            backend_line(data),
            "",
            _table(["producer", *labels], producer),
            "",
        ]
    return "\n".join(text)


def section_passthrough(data: dict[str, Any]) -> str:
    p = data["passthrough"]
    rows = [[f"`{r}`", _cell(p["msgs_per_s"][r])] for r in PASSTHROUGH_READERS]
    ratios = p["ratios"]
    lines = [
        "## Plain passthrough",
        "",
        f"{p['messages']:,} plain records of {p['size']} bytes in one partition, read to the end from the same "
        "topic by a raw `Consumer` and by `HybridConsumer`, each with `poll()` per message and with "
        "`consume(500)` batches. Messages/s, median (min-max).",
        "",
        backend_line(data),
        "",
        _table(["reader", "messages/s"], rows),
        "",
        f"Ratios: poll {ratios['poll']:.2f}, consume {ratios['consume']:.2f}, HybridConsumer.poll vs the fastest "
        f"raw reader {ratios['poll_vs_fastest_raw']:.2f}.",
        "",
    ]
    if "produce" in ratios:  # results from before the writers were measured have no such rows
        writers = [[f"`{w}`", _cell(p["msgs_per_s"][w])] for w in PASSTHROUGH_WRITERS]
        lines += [
            "The same records written, each writer to its own fresh topic, by a raw `Producer` and by "
            "`HybridProducer`, one `produce()` per record, until `flush()` has every acknowledgement "
            "(no target; reported because every small record pays it):",
            "",
            _table(["writer", "messages/s"], writers),
            "",
            f"Ratio: produce {ratios['produce']:.2f}.",
            "",
        ]
    return "\n".join(lines)


def _profile_summary(gw: dict[str, Any], base: dict[str, Any], speed: str) -> str:
    """What the gateway side spends beyond its baseline, and whether the rerun reproduced the miss."""
    extra = sorted(
        ((c, share - base["components"].get(c, 0.0)) for c, share in gw["components"].items()), key=lambda kv: -kv[1]
    )
    extra = [(c, d) for c, d in extra if d >= 0.03]
    text = (
        "Beyond its baseline, the gateway side spends its time in: "
        + "; ".join(f"{c} (+{100 * d:.0f} points)" for c, d in extra)
        + "."
        if extra
        else "The gateway side's time splits like its baseline's."
    )
    ours, theirs = gw.get("calls_per_message", {}), base.get("calls_per_message", {})
    counted = sorted(set(ours) | set(theirs))
    if counted:
        text += (
            " Calls per message, gateway vs baseline: "
            + "; ".join(f"{k} {ours.get(k, 0.0):.2f} vs {theirs.get(k, 0.0):.2f}" for k in counted)
            + "."
        )
    if gw.get(speed) and base.get(speed):
        ratio = gw[speed] / base[speed]
        text += f" Profiled ratio {ratio:.2f}"
        if ratio >= 0.9:
            text += (
                ": this single profiled rerun did not reproduce the shortfall, so weigh the measured ratio "
                "against the min-max of its repetitions."
            )
        else:
            text += " (cProfile slows Python code, the gateway's more than librdkafka's)."
    return text


_PROFILED = re.compile(r"((?:gateway|stores)/[\w/]+\.py):\d+\((\w+)\)")


def _function_cell(function: str, root: Path = ROOT) -> str:
    """A profiled function as the table shows it: marked when the tree no longer defines it in that module.

    The profile is of the code the run measured; a later rename or move leaves the recorded name as it was
    (it is a measurement), and the mark says so rather than point a reader at a function that is gone."""
    found = _PROFILED.fullmatch(function)
    if found is None:
        return f"`{function}`"
    path, name = root / found[1], found[2]
    if path.is_file() and re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b", path.read_text(), re.M):
        return f"`{function}`"
    return f"`{function}` (since renamed or moved)"


def section_profiles(data: dict[str, Any]) -> str:
    if not data.get("profiles"):
        return ""
    out = [
        "## Where the time goes (profiles of missed targets)",
        "",
        "Each missed target's worst case was run once more under cProfile, the gateway side and its baseline, "
        f"with at least {PROFILE_MB} MB of payload (30 000 records for passthrough). Every Python thread is "
        "profiled (the gateway consumer's fetch-ahead workers included) and shares are of the summed self "
        "time of all of them, so waiting in one thread and working in another both show. Time inside "
        "librdkafka calls (`poll`, `flush`, `consume`) includes waiting for the broker and for librdkafka's "
        "own C threads, which no Python profiler sees. Profiling slows Python code, so the profiled rates "
        "are lower than the measured ones; the shares are what matters. Function names are those of the code "
        "profiled; one the tree no longer has there is marked.",
        "",
    ]
    for prof in data["profiles"]:
        target = next((t for t in data["targets"] if t["id"] == prof["target"] and t["case"] == prof["case"]), None)
        ratio = f" (measured ratio {target['ratio']:.2f})" if target else ""
        gw, base = prof["gateway"], prof["baseline"]
        comps = sorted(set(gw["components"]) | set(base["components"]), key=lambda k: -(gw["components"].get(k, 0.0)))
        speed = "msgs_per_s_profiled" if prof["target"].startswith("passthrough") else "MBps_profiled"
        unit = "msgs/s" if speed.startswith("msgs") else "MB/s"
        workers = (
            f" ({gw['worker_threads']} worker threads, {100 * gw['worker_share']:.0f} % of the self time)"
            if gw.get("worker_threads")
            else ""
        )
        out += [
            f"### `{prof['target']}`: {prof['case']}{ratio}",
            "",
            f"Profiled: gateway `{gw['variant']}` {_num(gw[speed])} {unit} in {gw['seconds_profiled']:.2f} s"
            f"{workers}; baseline `{base['variant']}` {_num(base[speed])} {unit} in "
            f"{base['seconds_profiled']:.2f} s.",
            "",
            _table(
                [
                    "component (share of profiled self time)",
                    f"gateway `{gw['variant']}`",
                    f"baseline `{base['variant']}`",
                ],
                [
                    [c, f"{100 * gw['components'].get(c, 0.0):.0f} %", f"{100 * base['components'].get(c, 0.0):.0f} %"]
                    for c in comps
                ],
            ),
            "",
            _profile_summary(gw, base, speed),
            "",
            "Top functions of the gateway side by self time:",
            "",
            _table(
                ["function", "calls", "self s", "cumulative s"],
                [
                    [_function_cell(r["function"]), str(r["ncalls"]), f"{r['tottime']:.3f}", f"{r['cumtime']:.3f}"]
                    for r in gw["top_self"][:10]
                ],
            ),
            "",
        ]
        if gw["top_own_cumulative"]:
            out += [
                "The gateway's own functions by cumulative time:",
                "",
                _table(
                    ["function", "calls", "self s", "cumulative s"],
                    [
                        [_function_cell(r["function"]), str(r["ncalls"]), f"{r['tottime']:.3f}", f"{r['cumtime']:.3f}"]
                        for r in gw["top_own_cumulative"][:8]
                    ],
                ),
                "",
            ]
    return "\n".join(out)


def section_method(data: dict[str, Any]) -> str:
    env, plan = data["env"], data["plan"]
    sizes = ", ".join(f"{int(s) / 1e6:g} MB x{n}" for s, n in plan["sizes"].items())
    wall = data.get("wall_seconds_total") or data.get("wall_seconds")
    return "\n".join(
        [
            "## Method",
            "",
            f"- Command: `{_command(env['argv'])}`; mode **{data['mode']}**; started {data['started']}; "
            f"wall time {wall:.0f} s (servers, measurements, profiles and this report"
            + (
                ": " + ", ".join(f"{k} {v:.0f} s" for k, v in data["phase_seconds"].items())
                if data.get("phase_seconds")
                else ""
            )
            + ").",
            f"- Kafka broker: **{env['kafka']}** (`--backend {env['kafka_backend']}`); Redis: {env['redis']}; "
            f"S3: {env['s3']}. Clients: confluent-kafka {env['confluent_kafka']} (librdkafka {env['librdkafka']}), "
            f"redis-py {env['redis_py']} (hiredis {env['hiredis']}), boto3 {env['boto3']}; Python {env['python']} on "
            f"{env['platform']}, {env['cpus']} CPUs. Broker, Redis and S3 all run on the same machine as the client.",
            f"- Fixed sizes: {sizes} per repetition, {plan['repeats']} repetitions; mixes {plan['mix_repeats']}; "
            f"latency {plan['latency_repeats']}; passthrough {plan['passthrough_repeats']}. Every variant of a cell "
            "runs on its own fresh one-partition topic, one after the other (never concurrently), in alternating "
            "order between repetitions; topics and store keys are deleted after each repetition.",
            "- Clients are created and connected (one metadata round trip) before the clock starts; a gateway "
            "producer also learns the topic's `cleanup.policy` then (`prepare_topics`), which it would otherwise "
            "ask the brokers at its first reference or multi-segment message. Producers: "
            "`acks=all`, `linger.ms=5`, `batch.size=1000000`. Chunked variants use `message.max.bytes=1000000` and "
            f"{env['segment_bytes']:,}-byte segments; `raw.record` raises `message.max.bytes` to "
            f"{env['raised_message_max_bytes']:,} and its consumer's fetch limits to 200 MB. Consumers use "
            "`assign()` at offset 0 (no group join), `fetch.wait.max.ms=10`.",
            "- Payload MB/s everywhere (10^6 bytes/s of payload, whatever the route writes to Kafka), so ratios are "
            "ratios of time. Consumers verify the byte count; the gateway also verifies "
            "the digest (BLAKE3 or SHA-256) of references.",
            f"- Memory: {env['memory_method']}.",
            "",
        ]
    )


_BROKER_CAVEATS = {
    "kafka": "**{kafka}** is the real broker, one KRaft node (broker and controller in one JVM) with its log on "
    "the local disk and no replication: a production cluster adds replication round trips that no cell here pays.",
    "mock": "**{kafka}** is librdkafka's in-process mock cluster: no network, no disk, no replication.",
    "external": "**{kafka}** is a cluster given by `KAFKA_BOOTSTRAP_SERVERS`; what it runs on is not recorded here.",
}
_EMULATOR_CAVEAT = "**{kafka}** is an emulation: single broker, no replication, not Apache Kafka's own code."


def _broker_caveat(env: dict[str, Any]) -> str:
    """What the broker of this run is, so nobody reads an emulator's MB/s as Apache Kafka's (or the reverse)."""
    template = _BROKER_CAVEATS.get(str(env.get("kafka_backend", "")), _EMULATOR_CAVEAT)
    return template.format(kafka=env["kafka"])


def section_caveats(data: dict[str, Any]) -> str:
    env = data["env"]
    return "\n".join(
        [
            "## Caveats",
            "",
            f"- {_broker_caveat(env)} moto is a Python S3 emulation in another process on the same cores. "
            "Absolute MB/s say little about a production cluster; ratios measured in one run on one machine say "
            "more. Rerun with `--backend external` (`KAFKA_BOOTSTRAP_SERVERS`) and `REDIS_URL` / `S3_ENDPOINT_URL` "
            "to measure real services.",
            f"- {env['cpus']} CPUs are shared by the client, the broker, redis-server and moto: a route that needs "
            "more CPU in the client (hashing, reassembly) competes with the servers it talks to.",
            "- Quick mode moves only a few tens of MB per cell, so a single scheduling hiccup moves a median; the "
            "min-max columns show how far. Full mode (`gateway bench`) moves 5-7x the volume per cell, adds 100 MB "
            "payloads, and repeats the fixed sizes and passthrough 7 times, mixes and latency 5 times.",
            "- Memory: a quick-mode cell (10-30 MB) is smaller than librdkafka's prefetch queue (64 MiB) and the "
            "gateway's fetch-ahead budget (32 MB), so a consumer may hold the whole cell and several consumers then "
            "show the same figure; full mode's larger cells show where each one's memory is bounded.",
            "- At 100 KB the forced `chunked` route writes each value as one LinkedIn segment (the default policy "
            "would send it plain, untouched); the ceiling does the same.",
            "- The `+env` ceilings are sequential (write, then produce; read, then GET); the gateway consumer "
            "fetches referenced payloads ahead in parallel, so a ratio above 1 is possible there.",
            "- Latency is measured in lock step (no queueing), so it is the floor a loaded system starts from.",
            "",
        ]
    )


# -- Spark: hybrid-kafka beside Spark's own Kafka source (benchmarks/results/spark.json) ---------------

SPARK_RESULTS = RESULTS / "spark.json"
ENCRYPTION_RESULTS = RESULTS / "encryption.json"
CLOUDS_RESULTS = RESULTS / "clouds.json"
COMPRESSION_RESULTS = RESULTS / "compression.json"


def load_spark(path: Path = SPARK_RESULTS) -> dict[str, Any] | None:
    """``python -m benchmarks.spark``'s results, or None when absent or from before the comparison existed."""
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data if data.get("kind") == "spark-sources" else None


def _spark_median(results: list[dict[str, Any]], case: str, master: str, source: str, key: str) -> float:
    for r in results:
        if (r["case"], r["master"], r["source"]) == (case, master, source):
            return float(r[key]["median"])
    return float("nan")


def load_encryption(path: Path = ENCRYPTION_RESULTS) -> dict[str, Any] | None:
    """``python -m benchmarks.encryption``'s results, or None when absent."""
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data if "redis" in data and "cipher" in data else None


def section_encryption(data: dict[str, Any] | None) -> str:
    """``reference.encryption=aes256-gcm`` beside ``none`` on the Redis and S3 routes (docs/security.md)."""
    if data is None:
        return ""
    rows = []
    for route in ("redis", "s3"):
        row = data.get(route)
        if row is None:
            continue
        for side in ("produce", "consume"):
            off, on = row["off"][side], row["on"][side]
            runs = len(row.get("samples", {}).get("on", {}).get(side, []))
            cpu = [row[mode].get(f"{side}_cpu_ms") for mode in ("off", "on")]
            cpu_cells = [f"{c:.1f}" if c is not None else "n/a" for c in cpu]
            rows.append([f"{route} {side}", f"{off:.0f}", f"{on:.0f}", _ratio(on / off), *cpu_cells, str(runs)])
    cipher = data["cipher"]
    return "\n".join(
        [
            "## Encryption cost: `reference.encryption=aes256-gcm`",
            "",
            "From `benchmarks/results/encryption.json` (`gateway bench --suite encryption`, or "
            f"`python -m benchmarks.encryption`, "
            f"{'Apache Kafka' if data['backend'] == 'kafka' else data['backend']} broker, "
            f"{_bytes(data['size'])} payloads, local key ring). Off and on alternate within each repetition; "
            "median payload MB/s of the repetitions, and the process's CPU time per payload (producer or consumer "
            "process, every thread), which varies less than wall time on a shared machine.",
            "",
            _table(
                ["route", "off MB/s", "on MB/s", "on / off", "CPU ms/payload off", "CPU ms/payload on", "runs"], rows
            ),
            "",
            f"Sealing alone runs at {cipher['seal_mbps']:.0f} MB/s and opening (into a fresh `bytes`) at "
            f"{cipher['open_mbps']:.0f} MB/s on one core: a 10 MB payload costs about "
            f"{10_000 / cipher['seal_mbps']:.1f} ms to seal and {10_000 / cipher['open_mbps']:.1f} ms to open "
            "(on a machine shared with other test runs; twice as fast when it is idle). The producer adds the "
            "sealing to the envelope's digest; the consumer opens a sealed payload instead of hashing it (AES-GCM "
            "authenticates it, see docs/security.md), so its CPU per payload barely moves. `cryptography`'s "
            "AES-GCM holds the GIL while BLAKE3 releases it, which is what the remaining wall-time gap is.",
        ]
    )


def load_ab(results: Path | None = None) -> list[dict[str, Any]]:
    """Every ``gateway bench --against REF --update-docs`` run (``benchmarks/results/ab-SUITE.json``), by suite."""
    found = [_load_kind(path, "ab") for path in sorted((results or RESULTS).glob("ab-*.json"))]
    return [data for data in found if data is not None]


def section_ab(runs: list[dict[str, Any]]) -> str:
    """The A/B tables: each entry's medians and spreads on both sides, and the ratio with the pairs' spread."""
    if not runs:
        return ""
    lines = [
        "## A/B against a git ref",
        "",
        "From `benchmarks/results/ab-*.json` (`gateway bench --against REF --suite SUITE --update-docs`, "
        "or `python -m benchmarks.ab`). The working tree and the ref run alternately in pairs (tree then ref, then "
        "ref then tree, ...) on one broker, each repetition in a fresh process on fresh topics, with the same "
        "harness (the tree's "
        "`benchmarks/`); only `gateway` and `stores` differ. Each side: median (min-max) of its repetitions; "
        "tree / ref: the ratio of the medians, and in brackets the min-max of the pairs' own ratios (repetition "
        "*i* of the tree over repetition *i* of the ref). An entry is flagged, and the command exits 8, when "
        "either median lies outside the other side's min-max.",
    ]
    for run in runs:
        lines += [
            "",
            f"**{run['suite']}**: tree {run['tree']} against `{run['against']}` ({run['ref_commit'][:10]}), "
            f"{run['pairs']} pairs (order {run.get('order', 'tree, ref').split(' (')[0]}; "
            f"{run.get('warmup_runs', 0)} warm-up runs first), {run['kafka']}, "
            f"{run['started']}; "
            f"the ref ran on {run['ref_environment']}.",
            "",
            markdown_table(from_json(run["rows"])),
        ]
    return "\n".join(lines)


def _load_kind(path: Path, kind: str) -> dict[str, Any] | None:
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data if data.get("kind") == kind else None


def load_clouds(path: Path | None = None) -> dict[str, Any] | None:
    """``gateway bench --suite clouds``'s results (``python -m benchmarks.cloud_clients`` writes one part)."""
    return _load_kind(path or CLOUDS_RESULTS, "clouds")


def load_compression(path: Path | None = None) -> dict[str, Any] | None:
    """``python -m benchmarks.compression``'s results, or None when absent."""
    return _load_kind(path or COMPRESSION_RESULTS, "compression")


_CLOUD_CLIENTS = (
    ("GCS google-cloud-storage", "google-cloud-storage (raw)"),
    ("GCS obstore (GCS)", "obstore (GCS)"),
    ("GCS GCSStore", "`GCSStore`"),
    ("Azure azure-storage-blob", "azure-storage-blob (raw)"),
    ("Azure obstore (Azure)", "obstore (Azure)"),
    ("Azure AzureBlobStore", "`AzureBlobStore`"),
)


def _clients_table(part: dict[str, Any]) -> str:
    sizes = [int(n) // 1_000_000 for n in part["sizes"]]
    header = ["MB/s", *(f"{op} {mb} MB" for mb in sizes for op in ("put", "get"))]
    rows = []
    for key, label in _CLOUD_CLIENTS:
        figures = part["results"].get(key)
        if figures is None:
            continue
        failed = [k for k in figures if k.startswith("failed")]
        if failed:
            rows.append([label, *(["-"] * (len(header) - 2)), failed[0]])
            continue
        cells = [label]
        for mb in sizes:
            cells.append(_num(figures.get(f"put {mb} MB")))
            got = _num(figures.get(f"get {mb} MB"))
            ranged = figures.get(f"ranged get {mb} MB")
            # a store reads a large payload in ranges itself: its "ranged" figure would only re-read it whole
            if ranged is not None and "Store" not in key:
                got += f" ({_num(ranged)} in ranges)"
            cells.append(got)
        rows.append(cells)
    return _table(header, rows)


def _routes_table(part: dict[str, Any]) -> str:
    rows = []
    for cell in part["sizes"]:
        for route, ceiling in part["ceilings"].items():
            ratio = cell["ratio_stats"][route]
            rows.append(
                [
                    f"`{route}` ÷ `{ceiling}`",
                    cell["label"],
                    f"{_cell(cell['produce'][route])} ÷ {_num(cell['produce'][ceiling]['median'])}",
                    f"{_cell(cell['consume'][route])} ÷ {_num(cell['consume'][ceiling]['median'])}",
                    _cell(ratio["produce"], fmt=_ratio),
                    _cell(ratio["consume"], fmt=_ratio),
                ]
            )
    return _table(
        ["route ÷ ceiling", "size", "produce MB/s (route ÷ ceiling)", "consume MB/s", "produce ratio", "consume ratio"],
        rows,
    )


def section_clouds(data: dict[str, Any] | None) -> str:
    """The GCS and Azure stores beside Redis and S3 through Kafka, and alone against their SDKs."""
    if data is None or not (data.get("routes") or data.get("clients")):
        return ""
    lines = ["## GCS and Azure Blob stores beside Redis and S3", ""]
    routes = data.get("routes")
    if routes:
        env = routes["env"]
        lines += [
            f"From the `routes` part of `benchmarks/results/clouds.json` (`gateway bench --suite clouds`, "
            f"{routes['started']}, {routes['wall_seconds']:.0f} s, {routes['mode']} mode). The four reference routes "
            f"through Kafka (**{env['kafka']}**) in one run, each against its own ceiling as in "
            "[Each route against its ceiling](#each-route-against-its-ceiling): the store's raw client writes the "
            "payload (redis-py `SET`, boto3 `put_object`, google-cloud-storage `upload_from_string`, "
            "azure-storage-blob `upload_blob`) and then produces an envelope-sized record; its consumer reads the "
            "record and fetches the payload one at a time. The stores run on "
            f"{env['redis']}, {env['s3']}, fake-gcs-server {env['fake_gcs_server']} and Azurite {env['azurite']}, "
            f"all on the same {env['cpus']} CPUs as the broker. Route and ceiling run back to back in each of "
            f"{routes['repeats']} repetitions (order alternating); the ratio is the median of the per-repetition "
            "ratios (min-max). MB/s is the route's median (min-max) ÷ the ceiling's median.",
            "",
            _routes_table(routes),
            "",
            "The GCS and Azure stores run with the defaults a producer gets: SHA-256 and metadata on each object, "
            "one journal marker per batch of 64 writes, one upload request per payload below 32 MiB (the SDK "
            "picks its form, as it does for the raw call: google-cloud-storage sends more than 8 MiB as a "
            "resumable upload) and one whole-object read below 16 MiB; the Redis producer runs with "
            "`reference.write.window=8`. The gateway's consumers fetch ahead in 4 threads where the ceilings "
            "read one payload at a time, so a consume ratio above 1 is possible. The emulators, not the network, "
            "bound these figures, and they share the machine's cores with the broker and the client.",
            "",
        ]
    clients = data.get("clients")
    if clients:
        env = clients["env"]
        sizes = " and ".join(_bytes(n) for n in clients["sizes"])
        lines += [
            "### The stores alone against their raw clients",
            "",
            f"From the `clients` part of `benchmarks/results/clouds.json` ({clients['started']}, "
            f"`python -m benchmarks.cloud_clients`, run by `gateway bench --suite clouds` too): no Kafka, the "
            f"stores on their emulators, fake-gcs-server {env['fake_gcs_server']} and Azurite {env['azurite']} "
            f"(google-cloud-storage {env['google_cloud_storage']}, azure-storage-blob {env['azure_storage_blob']}), "
            f"on this {env['cpus']}-core machine shared with other jobs, {sizes}, best of {clients['repeat']}. The "
            "raw client is the official SDK with one call per object (large objects in 8 MiB parts, and 8 MiB "
            "ranges 4 at a time for the ranged read); the store adds its SHA-256, the object's metadata and the "
            "journal (here one marker per payload, `journal_batch=1`, the slowest setting), and reads a payload "
            "of 16 MiB or more in ranges. Each store read is given the payload's size, as a consumer gives it from "
            "the envelope: one ranged GET, no request for the size first.",
            "",
            _clients_table(clients),
            "",
            "Azurite stores every block on disk and a second run of the same script moved single figures by up to "
            "2x, so these compare clients and routes, not clouds. The GCS store's large write is a resumable upload "
            "of 8 MiB chunks, one after the other (the SDK's protocol), where the raw call here sent 8 MiB chunks "
            "too; the Azure store stages 4 blocks at a time.",
            "",
        ]
    return "\n".join(lines)


def _compression_routes(routes: dict[str, Any]) -> list[str]:
    """Compression off and on through the Redis and S3 routes: what the codec saves and costs end to end."""
    rows = []
    off = {(r["route"], r["payload"]): r for r in routes["rows"] if r["codec"] == "none"}
    for r in routes["rows"]:
        base = off.get((r["route"], r["payload"]))
        ratios = ["", ""]
        if base is not None and r["codec"] != "none":
            ratios = [_ratio(r[side]["median"] / base[side]["median"]) for side in ("produce", "consume")]
        rows.append(
            [
                r["route"],
                r["payload"],
                r["codec"],
                f"{r['store_per_payload_byte']:.4f}",
                _cell(r["produce"]),
                _cell(r["consume"]),
                *ratios,
            ]
        )
    env = routes["env"]
    counts = ", ".join(sorted({f"{r['route']} {r['messages']}" for r in routes["rows"]}))
    text = [r["store_per_payload_byte"] for r in routes["rows"] if r["payload"] == "JSON-like" and r["codec"] != "none"]
    saved = f"{1 / max(text):.0f}x" if text and max(text) > 0 else "far"
    return [
        f"Through the routes, on Kafka **{env['kafka']}** with {env['redis']} and moto: "
        f"`reference.compression` `none` and `zstd` alternate in each of {routes['repeat']} repetitions, each run "
        f"producing {_bytes(routes['size'])} payloads ({counts} per run) on a fresh topic, flushing, then reading "
        "them back with `HybridConsumer`. MB/s are payload bytes, median (min-max); store bytes per payload byte "
        "is what the store's own counter wrote. The random payloads cost zstd's attempt and save nothing; the "
        f"JSON-like ones trade the codec's CPU for {saved} fewer bytes to the store, which pays where the store is "
        "slower than the codec.",
        "",
        _table(
            [
                "route",
                "payload",
                "codec",
                "store bytes per payload byte",
                "produce MB/s",
                "consume MB/s",
                "produce zstd ÷ none",
                "consume zstd ÷ none",
            ],
            rows,
        ),
    ]


def section_compression(data: dict[str, Any] | None) -> str:
    """``reference.compression``: what each codec saves in the store and costs per message."""
    if data is None:
        return ""
    rows = []
    for r in data["rows"]:
        enc, dec = r.get("encode_mbps"), r.get("decode_mbps")
        rows.append(
            [
                r["payload"],
                r["codec"],
                f"{r['store_per_payload_byte']:.4f}",
                "n/a" if enc is None else f"{enc:.0f}",
                "n/a" if dec is None else f"{dec:.0f}",
            ]
        )
    env = data["env"]
    by = {(r["payload"], r["codec"]): r for r in data["rows"]}
    lines = [
        "## Compression: `reference.compression`",
        "",
        f"From `benchmarks/results/compression.json` (`gateway bench --suite compression`, or `python -m "
        f"benchmarks.compression`, {data['started']}): {_bytes(data['size'])} of each payload, best of "
        f"{data['repeat']}, cramjam {env['cramjam']} on one of {env['cpus']} CPUs. Store bytes per payload byte is "
        "what the store holds for each payload byte (codec frame included); encode is what the producer adds per "
        "message, decode what the consumer adds, with the bounded decoders. No codec stores the payload as it is: "
        "nothing to time.",
        "",
        _table(["payload", "codec", "store bytes per payload byte", "encode MB/s", "decode MB/s"], rows),
    ]
    zstd_text, lz4_text = by.get(("JSON-like", "zstd")), by.get(("JSON-like", "lz4"))
    zstd_random = by.get(("random", "zstd"))
    if zstd_text and lz4_text and zstd_random and zstd_text["encode_mbps"] and zstd_random["encode_mbps"]:
        lines += [
            "",
            f"zstd is the one to choose: {1 / zstd_text['store_per_payload_byte']:.0f}x fewer store bytes for "
            f"JSON-like text at {zstd_text['encode_mbps']:.0f} MB/s, and on random bytes it notices they do not "
            f"compress and stores them (almost) as they are at {zstd_random['encode_mbps']:.0f} MB/s. gzip costs "
            f"most CPU for no gain over zstd; lz4 stores "
            f"{lz4_text['store_per_payload_byte'] / zstd_text['store_per_payload_byte']:.0f}x zstd's bytes on text. "
            "The codecs run on one core per message.",
        ]
    routes = data.get("routes")
    if routes:
        lines += ["", *_compression_routes(routes)]
    return "\n".join(lines)


def section_spark(data: dict[str, Any] | None) -> str:
    if data is None:
        return ""
    env, results = data["env"], data["results"]
    masters = sorted({r["master"] for r in results})
    jars = ", ".join(j for j in env["spark_jars"] if j.startswith(("spark-sql-kafka", "kafka-clients"))) or "not used"
    rows = []
    for case in data["cases"]:
        for master in masters:
            got = {r["source"]: r for r in results if r["case"] == case["name"] and r["master"] == master}
            ours, theirs = got.get("hybrid-kafka"), got.get("kafka")
            cells = [f"{case['messages']:,} x {_bytes(case['size'])} {case['route']}", master]
            for got_one in (ours, theirs):
                cells += [
                    _cell(got_one and got_one["seconds"], " s"),
                    _cell(got_one and got_one["rows_per_s"]),
                    _cell(got_one and got_one["MBps"]),
                ]
            rows.append([*cells, _cell(theirs and theirs.get("ours_over_theirs"), fmt=_ratio)])
    scaling = []
    if len(masters) == 2:
        for case in data["cases"]:
            cells = [f"{case['messages']:,} x {_bytes(case['size'])} {case['route']}"]
            for source in ("hybrid-kafka", "kafka"):
                one, two = (_spark_median(results, case["name"], m, source, "payload_MBps") for m in masters)
                cells.append("-" if math.isnan(one) or math.isnan(two) else _ratio(two / one))
            scaling.append(cells)
    chunked = [c for c in data["cases"] if c["route"] == "chunked"]
    segments = "; ".join(f"{c['messages']} messages of {_bytes(c['size'])} in {c['records']} records" for c in chunked)
    lines = [
        "## Spark: hybrid-kafka vs Spark's Kafka source",
        "",
        f"*Measured on Kafka **{env['kafka']}** · PySpark {env['pyspark']} · {jars} · {env['cpus']} CPUs "
        f"· {data['repeats']} repetitions*",
        "",
        f"Generated from `benchmarks/results/spark.json` ({data['started']}, {data['wall_seconds']:.0f} s); rerun "
        "with `python -m benchmarks.spark` (needs `make spark-kafka`). The same topics "
        f'({data["partitions"]} partitions each) are read by `format("hybrid-kafka")` and Spark\'s own '
        '`format("kafka")` (spark-sql-kafka-0-10, given to the session with `spark.jars`), alternating in one '
        "SparkSession per master after one untimed read each; every read computes `count(*)` and "
        "`sum(length(value))`. Both sources run with their defaults (among them: `hybrid-kafka` fetches up to "
        "8 MiB per partition, Spark's Java consumer 1 MiB), and Spark's source stays in the JVM while "
        "`hybrid-kafka` reads in Python workers and hands Arrow batches over.",
        "",
        "Rows/s counts the rows a source returns and MB/s the value bytes it returns (10^6 B/s), each as median "
        "(min-max); the read time is the whole query, planning included. The first case, one record per "
        "partition, shows what a query costs whatever it reads. For plain records the two return the same rows. "
        "**For chunked messages they do not**: Spark's "
        "source hands back the raw LinkedIn segments (segment header included in the value), `hybrid-kafka` the "
        f"whole messages ({segments}); the application would still have to reassemble Spark's rows. "
        "`hybrid-kafka / kafka` is computed per repetition on payload bytes per second (the same payload for both, "
        "so it is a ratio of read times): above 1 means `hybrid-kafka` was faster.",
        "",
        _table(
            [
                "case",
                "master",
                "hybrid-kafka read",
                "rows/s",
                "MB/s",
                "kafka read",
                "rows/s",
                "MB/s",
                "hybrid-kafka / kafka",
            ],
            rows,
        ),
    ]
    if scaling:
        lines += [
            "",
            f"Scaling, {masters[1]} / {masters[0]} (median payload MB/s):",
            "",
            _table(["case", "hybrid-kafka", "kafka"], scaling),
        ]
    lines += [
        "",
        f"Caveats: {env['note']}. Broker, Spark driver, executors and Python workers share "
        f"{env['cpus']} CPUs. `{masters[0]}` runs first, in a fresh JVM, and runs the "
        f"{data['partitions']} tasks of a read one after the other, so its per-task waits add up where "
        f"`{masters[-1]}` overlaps them: a scaling figure above 2 comes from there, not from the cores. "
        "Volumes are modest (tens to a few hundred MB per read), so the fixed cost of a query weighs in.",
        "",
    ]
    return "\n".join(lines)


def _command(argv: str) -> str:
    """The run's command line without the checkout path older results recorded (``/home/.../__main__.py``)."""
    first, _, rest = argv.partition(" ")
    if first.endswith("benchmarks/__main__.py"):
        return f"python -m benchmarks {rest}".rstrip()
    return argv


def render(data: dict[str, Any], images: dict[str, Path], docs: Path, spark: dict[str, Any] | None = None) -> str:
    img = {k: _rel(p, docs) for k, p in images.items()}
    env = data["env"]
    head = "\n".join(
        [
            "# Benchmarks: which route when",
            "",
            f"<!-- generated by `python -m benchmarks.report` from benchmarks/results/{data['name']}.json; "
            "do not edit, rerun `gateway bench` -->",
            "",
            f"Generated from `benchmarks/results/{data['name']}.json` ({data['mode']} mode, {data['started']}). "
            f"Kafka broker **{env['kafka']}**, {env['redis']}, {env['s3']}; every table below repeats this.",
            f"This run took {data.get('wall_seconds_total') or data['wall_seconds']:.0f} s on {env['cpus']} CPUs. "
            "Regenerate with `make bench BENCH_ARGS=--update-docs` (full mode: more volume, 100 MB payloads, "
            "7 repetitions of the fixed sizes; `gateway bench --quick --out DIR` writes a quick run elsewhere), or "
            "re-render this page from the JSON with `python -m benchmarks.report`.",
            "",
            'Routes: **chunked** (HybridProducer `route="chunked"` → HybridConsumer), **Redis reference** and '
            '**S3 reference** (`route="reference:<store>"`). Beside them in the same run: what users do instead '
            "(`raw.record`: one big record with the limits raised), the client ceiling (`raw.segments`) and the "
            "store ceilings (`redis.raw`, `s3.raw`, and with an envelope record `redis.raw+env`, `s3.raw+env`).",
            "",
            "The measured [which route when](#which-route-when-measured) table comes first, then the plots; the "
            "profiles of missed targets, the method and the caveats close the page.",
        ]
    )
    parts = [  # what a reader decides with first (the table, the plots), the profiles and method after
        head,
        section_which(data),
        section_throughput(data, img["throughput"]),
        section_ratio(data, img["ratio"]),
        section_latency(data, img["latency"]),
        section_mixes(data, img["mixes"]),
        section_targets(data),
        section_clouds(load_clouds()),
        section_compression(load_compression()),
        section_memory(data),
        section_streams(load_streams()),
        section_passthrough(data),
        section_spark(spark),
        section_encryption(load_encryption()),
        section_ab(load_ab()),
        section_profiles(data),
        section_method(data),
        section_caveats(data),
    ]
    return "\n\n".join(p.rstrip() for p in parts if p) + "\n"


def newest_results() -> Path:
    """The full-mode routes run that started last, by the time it recorded (a checkout's file times say
    nothing); a quick run only when there is no full one, so that quick numbers never replace full ones."""
    runs = [(json.loads(p.read_text()), p) for p in RESULTS.glob("routes*.json")]
    full = [(data, p) for data, p in runs if data.get("mode") == "full"] or runs
    found = [p for _, p in sorted(full, key=lambda run: str(run[0].get("started", "")))]
    if not found:
        raise SystemExit("no benchmarks/results/routes*.json yet: run `gateway bench --quick` first")
    return found[-1]


def main(argv: Sequence[str] | None = None, total_started: float | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", nargs="?", help="results JSON (default: newest benchmarks/results/routes*.json)")
    parser.add_argument("--docs", default=str(DOCS), help="markdown to write (default docs/benchmarks.md)")
    parser.add_argument("--img-dir", default=None, help="where the PNGs go (default: img/ beside the markdown)")
    args = parser.parse_args(argv)
    path = Path(args.results) if args.results else newest_results()
    data = json.loads(path.read_text())
    data.setdefault("name", path.stem)
    docs = Path(args.docs)
    images = make_plots(data, Path(args.img_dir) if args.img_dir else docs.parent / "img")
    if total_started is not None:  # called at the end of a run: record the wall time including this report
        data["wall_seconds_total"] = time.perf_counter() - total_started
        path.write_text(json.dumps(data, indent=2))
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text(render(data, images, docs, load_spark()))
    print(f"report: {docs} ({', '.join(str(p) for p in images.values())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
