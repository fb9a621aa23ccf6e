"""`bench micro`: google-benchmark binaries of two refs, compared per benchmark name.

Both refs are built from worktrees with the same flags (`-c opt` and any --flags) and published the
same way; then rounds run A B, B A, A B, ... (the order rotates, as in `bench compare`), each
round running the binary with `--benchmark_repetitions=R --benchmark_format=json`, pinned to the
given CPUs. Every repetition of a benchmark is one sample (aggregates such as _mean are ignored),
and the two sides' samples of each benchmark name are compared for real time and CPU time with
the unpaired statistics of `bench compare` (Mann-Whitney U, as google benchmark's own compare
tool does, plus a bootstrap interval of the median's change).
"""

import dataclasses
import json
import math
import os
import re
import subprocess
from typing import Any, Dict, List, Optional, Tuple

from tools.driver import build
from tools.driver import report
from tools.driver import stats

_UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


class MicroError(Exception):
    pass


def samples_from_json(data: Dict[str, Any], where: str) -> Dict[str, Dict[str, List[float]]]:
    """{benchmark name: {"real_time": [ns...], "cpu_time": [ns...]}} from google-benchmark JSON.

    MicroError naming `where` for a file that is not google-benchmark JSON.
    """
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise MicroError(f"{where}: not google-benchmark JSON (no \"benchmarks\" list)")
    out: Dict[str, Dict[str, List[float]]] = {}
    for i, b in enumerate(data["benchmarks"]):
        if not isinstance(b, dict):
            raise MicroError(f"{where}: not google-benchmark JSON: benchmarks[{i}] is not an "
                             "object")
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        name = b.get("run_name") or b.get("name")
        if not isinstance(name, str) or not name:
            raise MicroError(f"{where}: not google-benchmark JSON: benchmarks[{i}] has no name")
        name = re.sub(r"/repeats:\d+$", "", name)
        unit = b.get("time_unit", "ns")
        scale = _UNIT_NS.get(unit) if isinstance(unit, str) else None
        if scale is None:
            raise MicroError(f"{where}: {name}: unknown time_unit {unit!r}")
        entry = out.setdefault(name, {"real_time": [], "cpu_time": []})
        for key in ("real_time", "cpu_time"):
            value = b.get(key)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not math.isfinite(value) or value < 0):
                raise MicroError(f"{where}: {name}: {key} must be a number >= 0, not "
                                 f"{value!r}")
            entry[key].append(float(value) * scale)
    return out


def merge_samples(parts: List[Dict[str, Dict[str, List[float]]]]):
    merged: Dict[str, Dict[str, List[float]]] = {}
    for part in parts:
        for name, entry in part.items():
            m = merged.setdefault(name, {"real_time": [], "cpu_time": []})
            for key in m:
                m[key].extend(entry[key])
    return merged


def compare_samples(a: Dict[str, Dict[str, List[float]]], b: Dict[str, Dict[str, List[float]]]):
    """Rows for every benchmark present on both sides (lower time is better)."""
    rows = []
    for name in [n for n in a if n in b]:
        row = {"name": name}
        for key in ("real_time", "cpu_time"):
            row[key] = dataclasses.asdict(stats.compare(a[name][key], b[name][key], -1))
        rows.append(row)
    only = sorted(set(a) ^ set(b))
    return rows, only


def _ns(v: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if v >= scale:
            return f"{v / scale:.3f} {unit}"
    return f"{v:.1f} ns"


def table(rows, a_name: str, b_name: str) -> Tuple[List[str], List[List[str]]]:
    header = ["benchmark", f"{a_name} time", f"{b_name} time", "delta", "95% CI", "p", "verdict",
              "cpu delta", "cpu p", "cpu verdict", "n"]
    body = []
    for r in rows:
        t, c = r["real_time"], r["cpu_time"]
        ci = ("-" if t["ci_low_pct"] is None else
              f"[{t['ci_low_pct']:+.1f}%, {t['ci_high_pct']:+.1f}%]")
        body.append([r["name"], _ns(t["a"]["median"]), _ns(t["b"]["median"]),
                     f"{t['delta_pct']:+.2f}%" if t["delta_pct"] is not None else "-", ci,
                     "-" if t["p_value"] is None else f"{t['p_value']:.3f}", t["verdict"],
                     f"{c['delta_pct']:+.2f}%" if c["delta_pct"] is not None else "-",
                     "-" if c["p_value"] is None else f"{c['p_value']:.3f}", c["verdict"],
                     f"{t['a']['n']}/{t['b']['n']}"])
    return header, body


def run_refs(repo: str, target: str, baseline: str, branch: str, out_dir: str, rounds: int,
             repetitions: int, cpus: Optional[str], flags: List[str], bench_args: List[str],
             progress, bazel_startup: List[str] = ()) -> Tuple[Dict, Dict, Dict[str, Any]]:
    """Builds `target` at both refs, runs the rounds; returns (samples A, samples B, sources)."""
    binaries, sources = {}, {}
    for label, ref in (("A", baseline), ("B", branch)):
        src = build.resolve_ref(repo, ref)
        tree = build.worktree(repo, src)
        progress.log(f"building {label} ({ref} at {src.sha[:10]}): bazel build "
                     f"{' '.join(flags)} {target}")
        try:
            built = build.bazel_build(tree, flags, [target],
                                      os.path.join(out_dir, f"build-{label}.log"),
                                      worktree_server=True, startup=bazel_startup,
                                      on_tick=lambda s, l=label: progress.status(
                                          f"building {l}: {s:.0f} s"))
        except build.BuildError as e:
            raise MicroError(f"side {label} ({ref}) failed to build: {e}") from None
        published = build.publish({target: built[target]},
                                  os.path.join(out_dir, label, "bin"), "copy")
        binaries[label] = published[0]["path"]
        sources[label] = {"ref": ref, "sha": src.sha, "dirty": src.dirty, "subject": src.subject,
                          "artifact": published[0]}
    parts: Dict[str, list] = {"A": [], "B": []}
    order = stats.interleaved_order(["A", "B"], rounds)  # A B, B A, ...
    for n, (r, label) in enumerate(order, start=1):
        path = os.path.join(out_dir, "rounds", f"{r:02d}-{label}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        cmd = (["taskset", "-c", cpus] if cpus else []) + [
            binaries[label], f"--benchmark_repetitions={repetitions}",
            "--benchmark_format=json", f"--benchmark_out={path}",
            "--benchmark_out_format=json", *bench_args]
        progress.status(f"round {r}/{rounds}: {label}")
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise MicroError(f"{label} ({sources[label]['ref']}) exited {out.returncode} in "
                             f"round {r}: {out.stderr.strip()[-600:]}")
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            raise MicroError(f"{label} ({sources[label]['ref']}) wrote no readable "
                             f"{path} in round {r}: {e}") from None
        parts[label].append(samples_from_json(data, path))
        if n % 2 == 0:
            progress.log(f"round {r}/{rounds} done")
    progress.done()
    return merge_samples(parts["A"]), merge_samples(parts["B"]), sources


def write_report(rows, only, a_name, b_name, out_dir: str, header_lines: List[str]) -> str:
    header, body = table(rows, a_name, b_name)
    text = "\n".join(["# sluice bench micro", ""] + header_lines + [
        "", report.markdown_table(header, body), ""])
    if only:
        text += "\nOnly on one side (not compared): " + ", ".join(only) + "\n"
    path = os.path.join(out_dir, "report.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text
