"""SVG plots of a comparison, drawn with matplotlib (python3-matplotlib, headless Agg).

- latency.svg: latency by percentile, HdrHistogram style: the x axis is 1/(1 - p) on a log
  scale (50 %, 90 %, 99 %, 99.9 % ... equally spaced), one thin line per iteration and side,
  from each iteration's merged histogram (the loadgen's percentile spectrum).
- rps.svg: requests per second of every iteration, in run order, per side.
- cpu_memory.svg: the server's CPU (% of one core) and working set over each measured window.
"""

import os
import tempfile
from typing import Dict, List, Sequence, Tuple

# matplotlib wants a writable config directory; a test sandbox's HOME may not be one.
os.environ.setdefault("MPLCONFIGDIR", os.path.join(tempfile.gettempdir(), "sluice-bench-mpl"))
import matplotlib  # noqa: E402

matplotlib.use("Agg")
matplotlib.rcParams["svg.hashsalt"] = "sluice-bench"  # stable ids: the same data, the same file
matplotlib.rcParams["font.size"] = 9
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.ticker import FixedLocator, NullLocator  # noqa: E402

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


def _save(fig, path: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return path


def latency_curves(sides: Sequence[Tuple[str, List[List[Tuple[float, float]]]]],
                   path: str, title: str) -> str:
    """sides: (name, [spectrum of each iteration: [(percentile, ns), ...]])."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    top = 10.0
    for i, (name, spectra) in enumerate(sides):
        color = COLORS[i % len(COLORS)]
        for j, spectrum in enumerate(spectra):
            points = [(p, ns) for p, ns in spectrum if p < 100]
            if not points:
                continue
            xs = [1.0 / (1.0 - p / 100.0) for p, _ in points]
            ys = [ns / 1e6 for _, ns in points]
            top = max(top, xs[-1])
            ax.plot(xs, ys, color=color, linewidth=1.0, alpha=0.75,
                    label=name if j == 0 else None)
    ax.set_xscale("log")
    ticks = [t for t in (1, 2, 10, 100, 1000, 10000, 100000, 1000000) if t <= top * 1.01]
    labels = {1: "0%", 2: "50%", 10: "90%", 100: "99%", 1000: "99.9%", 10000: "99.99%",
              100000: "99.999%", 1000000: "99.9999%"}
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([labels[t] for t in ticks])
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(title)
    ax.legend(loc="upper left")
    return _save(fig, path)


def rps_per_iteration(sides: Sequence[Tuple[str, List[Tuple[int, float]]]], path: str,
                      title: str) -> str:
    """sides: (name, [(iteration, rps), ...])."""
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    for i, (name, points) in enumerate(sides):
        if not points:
            continue
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o", color=COLORS[i % len(COLORS)], label=name)
    ax.set_xlabel("iteration (sides interleaved in this order)")
    ax.set_ylabel("requests/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(title)
    ax.legend(loc="lower right")
    return _save(fig, path)


def cpu_memory(sides: Sequence[Tuple[str, List[Dict]]], path: str, title: str) -> str:
    """sides: (name, [{"samples": [[t, user_s, system_s, rss], ...], "window": seconds}])."""
    fig, (cpu_ax, mem_ax) = plt.subplots(2, 1, figsize=(7.5, 5.0), sharex=True)
    for i, (name, iterations) in enumerate(sides):
        color = COLORS[i % len(COLORS)]
        for j, it in enumerate(iterations):
            samples = [s for s in it["samples"] if 0 <= s[0] <= it["window"]]
            if len(samples) < 2:
                continue
            ts, cpu = [], []
            for a, b in zip(samples, samples[1:]):
                dt = b[0] - a[0]
                if dt > 0:
                    ts.append(b[0])
                    cpu.append(100.0 * ((b[1] - a[1]) + (b[2] - a[2])) / dt)
            label = name if j == 0 else None
            cpu_ax.plot(ts, cpu, color=color, linewidth=0.8, alpha=0.7, label=label)
            mem_ax.plot([s[0] for s in samples], [s[3] / (1 << 20) for s in samples],
                        color=color, linewidth=0.8, alpha=0.7, label=label)
    cpu_ax.set_ylabel("server CPU (% of a core)")
    cpu_ax.set_ylim(bottom=0)
    mem_ax.set_ylabel("working set (MB)")
    mem_ax.set_ylim(bottom=0)
    mem_ax.set_xlabel("seconds into the measured window")
    for ax in (cpu_ax, mem_ax):
        ax.grid(True, alpha=0.3)
    cpu_ax.legend(loc="lower right")
    cpu_ax.set_title(title)
    return _save(fig, path)


_VERDICT_COLORS = {"improvement": "#2ca02c", "regression": "#d62728"}


def deltas(rows: Sequence[Tuple[str, float, float, float, str]], path: str, title: str) -> str:
    """rows: (name, delta %, ci low %, ci high %, verdict) -> a bar per row with its interval,
    green for an improvement, red for a regression, grey for no significant change."""
    fig, ax = plt.subplots(figsize=(7.5, max(2.0, 0.32 * len(rows) + 1)))
    names = [r[0] for r in rows]
    ys = list(range(len(rows)))
    d = [r[1] for r in rows]
    err_low = [max(0.0, r[1] - r[2]) if r[2] is not None else 0 for r in rows]
    err_high = [max(0.0, r[3] - r[1]) if r[3] is not None else 0 for r in rows]
    ax.barh(ys, d, xerr=[err_low, err_high], capsize=3, alpha=0.85,
            color=[_VERDICT_COLORS.get(r[4], "#999999") for r in rows])
    ax.set_yticks(ys)
    ax.set_yticklabels(names)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("change, % (95 % interval; by round when paired)")
    ax.invert_yaxis()
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(title)
    return _save(fig, path)
