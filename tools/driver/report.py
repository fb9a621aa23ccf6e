"""Reports of a run or a comparison: the terminal text, report.md and a self-contained
report.html, all from one list of blocks so the three always say the same thing.

Per side: the seed's per-iteration table (Description | RPS | CPU (%) | Memory (MB) |
Avg. Latency (ms) | Startup (ms) | First Request (ms) | Latency (ms) | Errors) and its summary
block (medians here, where crank printed means). Then CPU per request split into user and kernel
time, the statistics of every metric against the baseline (median, mean, stdev, delta, 95 %
interval, p, verdict with `~` for no significant change; paired by round when the run
interleaved at least six, see stats.py), and the plots. Every
report names the machine: CPU model, cores, kernel, page-table isolation, the measured cost of
one system call.
"""

import base64
import html
import os
from typing import Any, Dict, List, Optional, Tuple

from tools.driver import flame
from tools.driver import metrics
from tools.driver import plots
from tools.driver import stats

# Blocks: ("h", level, text) ("p", text) ("table", header, rows) ("code", text) ("img", path, alt)


def _p(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return "<0.001" if v < 0.001 else f"{v:.3f}"


def _pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:+.2f}%"


def machine_line(env: Dict[str, Any]) -> str:
    m = env["machine"]
    sc = m.get("syscall_ns")
    syscall = f"{sc / 1000:.3f} µs" if sc else "not measured"
    return (f"{m['cpu_model']}, {m['cores']} cores, {m['memory_mb'] // 1024} GiB, kernel "
            f"{m['kernel']}, Meltdown: {m['meltdown']}; one system call (getppid) costs "
            f"{syscall}; {env['toolchain']['compiler']}")


def source_text(side: Dict[str, Any], subject_limit: int = 0) -> str:
    """The side's build source: sha (+ uncommitted changes), ref and commit subject, the subject
    cut to subject_limit characters when given."""
    src = side["source"]
    if not src.get("sha"):
        return "external command"
    dirty = " + uncommitted changes" if src.get("dirty") else ""
    subject = src.get("subject", "")
    if subject_limit and len(subject) > subject_limit:
        subject = subject[:subject_limit - 1].rstrip() + "…"
    return f"{src['sha'][:10]}{dirty} ({src.get('ref') or 'HEAD'}: {subject})"


def seed_row(label: str, it: Dict[str, Any]) -> List[str]:
    if it.get("status") != "ok":
        return [label] + ["failed"] + ["-"] * (len(metrics.SEED_TABLE) - 1)
    return [label] + [metrics.fmt(m.key, it.get(m.key)) for m in metrics.SEED_TABLE]


def seed_header() -> List[str]:
    return ["Description"] + [m.title for m in metrics.SEED_TABLE]


def summary_block(result: Dict[str, Any]) -> str:
    """The seed's summary, from the medians of the side's successful iterations."""
    its = result["iterations"]

    def med(key):
        s = result["summary"].get(key)
        return None if not s or not s["n"] else s["median"]

    ok = [it for it in its if it.get("status") == "ok" and not it.get("profiled")]
    total_requests = sum(it.get("requests", 0) for it in ok)
    duration_ms = sum(it.get("window_seconds", 0) for it in ok) * 1e3
    cpu_max = max((it["cpu_pct"] for it in ok), default=None)
    env = result["environment"]
    rows = [
        ("RequestsPerSecond:", metrics.fmt("rps", med("rps"))),
        ("Max CPU (%):", metrics.fmt("cpu_pct", cpu_max)),
        ("WorkingSet (MB):", metrics.fmt("memory_mb", med("memory_mb"))),
        ("Avg. Latency (ms):", metrics.fmt("avg_latency_ms", med("avg_latency_ms"))),
        ("Startup (ms):", metrics.fmt("startup_ms", med("startup_ms"))),
        ("First Request (ms):", metrics.fmt("first_request_ms", med("first_request_ms"))),
        ("Latency (ms):", metrics.fmt("latency_ms", med("latency_ms"))),
        ("Total Requests:", f"{total_requests:,}"),
        ("Duration: (ms)", f"{duration_ms:,.0f}"),
        ("Socket Errors:", f"{sum(it.get('socket_errors', 0) for it in ok):,}"),
        ("Bad Responses:", f"{sum(it.get('bad_responses', 0) for it in ok):,}"),
        ("Iterations:", f"{len(ok)} ok of {len([i for i in its if not i.get('profiled')])}"),
        ("Source:", source_text(result["side"])),
        ("Compiler:", env["toolchain"]["compiler"]),
        ("Fingerprint:", result["fingerprint"]["hash"]),
    ]
    return "\n".join(f"{k:<29}{v}" for k, v in rows)


def _counter_text(value: Optional[float]) -> str:
    """A server counter: whole numbers with thousands separators, '-' when not exposed."""
    if value is None:
        return "-"
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _side_blocks(result: Dict[str, Any]) -> List[tuple]:
    side = result["side"]
    title = f"{side['label']}: {side['name']}"
    blocks: List[tuple] = [("h", 2, title)]
    if side.get("variant") and side["variant"].get("description"):
        blocks.append(("p", side["variant"]["description"]))
    rows = []
    for it in result["iterations"]:
        label = f"{side['name']} #{it['index']}" + (" (profiled)" if it.get("profiled") else "")
        if it.get("failed_attempts"):
            label += f" (attempt {len(it['failed_attempts']) + 1})"
        rows.append(seed_row(label, it))
    blocks.append(("table", seed_header(), rows))
    counted = [it for it in result["iterations"] if it.get("server_counters")]
    if counted:
        names = list(counted[0]["server_counters"])
        blocks.append(("p", "Server counters after each load run (cumulative since the server "
                            "started; - where the server does not expose them):"))
        blocks.append(("table", ["iteration"] + names,
                       [[f"{side['name']} #{it['index']}"] +
                        [_counter_text(it["server_counters"].get(n)) for n in names]
                        for it in counted]))
    for it in result["iterations"]:
        for n, attempt in enumerate(it.get("failed_attempts") or [], 1):
            blocks.append(("p", f"Iteration {it['index']} failed at attempt {n} and was run "
                                f"again (scenario key retries):"))
            blocks.append(("code", attempt.get("error") or "unknown error"))
    failed = [it for it in result["iterations"] if it.get("status") != "ok"]
    for it in failed:
        blocks.append(("p", f"Iteration {it['index']} failed:"))
        blocks.append(("code", it.get("error", "unknown error")))
    blocks.append(("code", summary_block(result)))
    return blocks


def _cpu_table(results: List[Dict[str, Any]]) -> tuple:
    header = ["side"] + [m.title for m in metrics.CPU_TABLE] + ["driver sampling (% core)"]
    rows = []
    for r in results:
        s = r["summary"]
        row = [r["side"]["name"]]
        for m in metrics.CPU_TABLE:
            v = s.get(m.key)
            row.append(metrics.fmt(m.key, v["median"] if v and v["n"] else None))
        sampling = [it.get("sampler_cpu_pct") for it in r["iterations"]
                    if it.get("sampler_cpu_pct") is not None]
        row.append(f"{max(sampling):.2f}" if sampling else "-")
        rows.append(row)
    return ("table", header, rows)


def _stats_blocks(comparison: Dict[str, Any]) -> List[tuple]:
    blocks: List[tuple] = []
    base = comparison["sides"][0]["side"]["name"]
    for entry in comparison.get("statistics", []):
        blocks.append(("h", 2, f"{entry['name']} vs {base}"))
        by_round = bool(entry["metrics"]) and all(
            c.get("test") == "paired" for c in entry["metrics"].values())
        header = ["metric", f"{base} median", f"{entry['name']} median", f"{base} mean",
                  f"{entry['name']} mean", f"{base} stdev", f"{entry['name']} stdev",
                  "delta by round" if by_round else "delta", "95% CI", "p", "verdict"]
        rows = []
        for key, c in entry["metrics"].items():
            m = metrics.BY_KEY[key]
            ci = ("-" if c["ci_low_pct"] is None else
                  f"[{c['ci_low_pct']:+.1f}%, {c['ci_high_pct']:+.1f}%]")
            rows.append([m.title, metrics.fmt(key, c["a"]["median"]),
                         metrics.fmt(key, c["b"]["median"]), metrics.fmt(key, c["a"]["mean"]),
                         metrics.fmt(key, c["b"]["mean"]), metrics.fmt(key, c["a"]["stdev"]),
                         metrics.fmt(key, c["b"]["stdev"]), _pct(c["delta_pct"]), ci,
                         _p(c["p_value"]), c["verdict"]])
        blocks.append(("table", header, rows))
        blocks.append(("p", _test_text(entry["metrics"].values())))
        if entry.get("note"):
            blocks.append(("p", "Note: " + entry["note"]))
    return blocks


def _test_text(comparisons) -> str:
    """Which test the table's deltas, intervals and p-values come from (tools/driver/stats.py)."""
    comparisons = list(comparisons)
    tests = {c.get("test", "unpaired") for c in comparisons}
    counts = sorted({c["pairs"] for c in comparisons if c.get("test") == "paired"})
    rounds = (f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}") if counts else ""
    paired = (f"paired by round ({rounds} rounds): delta is the median of the per-round changes "
              "B/A (of the differences B − A, relative to A's median, where a value is 0 or "
              "negative), the interval the order-statistic interval of that median, p the "
              "Wilcoxon signed-rank test's; the iterations of a round ran in the same stretch of "
              "the run (in an order that rotates from round to round), so a drift of the "
              "machine's speed moves both and mostly cancels")
    unpaired = ("unpaired: delta is the change of the medians, the interval a bootstrap over "
                "both sides, p the Mann-Whitney U test's")
    if tests == {"paired"}:
        return "Test: " + paired + "."
    if "paired" in tests:
        return (f"Test: {paired}; metrics with values in fewer than {stats.MIN_PAIRS} rounds are "
                "compared unpaired.")
    return (f"Test: {unpaired} (fewer than {stats.MIN_PAIRS} rounds with both sides, or results "
            "of separate runs).")


def build_blocks(comparison: Dict[str, Any], plot_files: List[Tuple[str, str]]) -> List[tuple]:
    sides = comparison["sides"]
    first = sides[0]
    scenario = first["scenario"]
    blocks: List[tuple] = [("h", 1, f"sluice bench: {scenario['name']}")]
    if scenario.get("description"):
        blocks.append(("p", scenario["description"]))
    blocks.append(("p", "Machine: " + machine_line(first["environment"])))
    sources = [source_text(s["side"], subject_limit=60) for s in sides]
    if len(sides) > 1 and len(set(sources)) == 1:
        # Variants of one build: say the source once.
        order = ", ".join(f"{s['side']['label']} = {s['side']['name']}" for s in sides)
        order += f", all built from {sources[0]}"
    else:
        order = ", ".join(f"{s['side']['label']} = {s['side']['name']} ({src})"
                          for s, src in zip(sides, sources))
    blocks.append(("p", f"Sides: {order}. Iterations interleaved "
                        f"{' '.join(s['side']['label'] for s in sides)} ...; warmup "
                        f"{scenario['warmup']}, measured {scenario['duration']} each. CPU is % "
                        f"of one core, memory the peak working set (MiB), latencies from the "
                        f"loadgen's merged histograms."))
    partial = [f"{r['side']['name']}: {r['partial']}" for r in sides if r.get("partial")]
    stopped = comparison.get("stopped") or next((r["stopped"] for r in sides
                                                 if r.get("stopped")), None)
    if stopped:
        blocks.append(("p", "**STOPPED: partial results**: the run ended at a mistake in the "
                            "scenario that every iteration would hit; only the iterations that "
                            "finished before it are here. The mistake:"))
        blocks.append(("code", str(stopped)))
    elif comparison.get("interrupted") or partial:
        blocks.append(("p", "**INTERRUPTED: partial results** (Ctrl-C); only the iterations "
                            "that finished are here. "
                            + (comparison.get("interrupted") or "; ".join(partial)) + "."))
    fp = comparison.get("fingerprint", {})
    if fp.get("match", True):
        blocks.append(("p", f"Pinned configuration: fingerprint {first['fingerprint']['hash']}"
                            + (" on every side." if len(sides) > 1 else ".")))
    else:
        blocks.append(("p", "**FORCED: the sides' fingerprints differ** (--force); what "
                            "differs:"))
        blocks.append(("code", "\n".join(fp.get("differences", []))))
    for r in sides:
        blocks.extend(_side_blocks(r))
    blocks.append(("h", 2, "Server CPU per request (medians)"))
    blocks.append(_cpu_table(sides))
    blocks.extend(_stats_blocks(comparison))
    if plot_files:
        blocks.append(("h", 2, "Plots"))
        for path, alt in plot_files:
            blocks.append(("img", path, alt))
    for entry in comparison.get("profile_changes", []):
        blocks.append(("h", 2, f"Profile: self time that moved most ({entry['name']} vs "
                               f"{first['side']['name']})"))
        blocks.append(("table", ["function", f"{first['side']['name']} %", f"{entry['name']} %",
                                 "change (points)"],
                       [[f, f"{a:.2f}", f"{b:.2f}", f"{b - a:+.2f}"] for f, a, b in
                        entry["rows"]]))
    return blocks


def render_markdown(blocks: List[tuple], base_dir: str) -> str:
    out = []
    for b in blocks:
        if b[0] == "h":
            out.append("#" * b[1] + " " + b[2] + "\n")
        elif b[0] == "p":
            out.append(b[1] + "\n")
        elif b[0] == "code":
            out.append("```\n" + b[1] + "\n```\n")
        elif b[0] == "table":
            out.append(markdown_table(b[1], b[2]) + "\n")
        elif b[0] == "img":
            out.append(f"![{b[2]}]({os.path.relpath(b[1], base_dir)})\n")
    return "\n".join(out)


def markdown_table(header: List[str], rows: List[List[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    line = lambda cells: "| " + " | ".join(str(c).rjust(w) if i else str(c).ljust(w)  # noqa
                                          for i, (c, w) in enumerate(zip(cells, widths))) + " |"
    sep = "| " + " | ".join("-" * w for w in widths) + " |"
    return "\n".join([line(header), sep] + [line(r) for r in rows])


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1300px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
th{background:#f0f0f0}pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px}
img{max-width:100%;border:1px solid #ddd;margin:0.5em 0 1.5em;background:white}"""

# Marks the body once every plot image has decoded (a headless browser test reads it).
_SCRIPT = """window.addEventListener('load', function () {
  var imgs = document.querySelectorAll('img.plot'), ok = 0;
  imgs.forEach(function (i) { if (i.complete && i.naturalWidth > 0) ok++; });
  document.body.setAttribute('data-plots-loaded', ok + '/' + imgs.length);
  document.title = document.title + ' [' + ok + '/' + imgs.length + ' plots]';
});"""


def render_html(blocks: List[tuple], title: str) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title)}</title><style>{_CSS}</style>",
           f"<script>{_SCRIPT}</script></head><body>"]
    for b in blocks:
        if b[0] == "h":
            out.append(f"<h{b[1]}>{html.escape(b[2])}</h{b[1]}>")
        elif b[0] == "p":
            text = html.escape(b[1]).replace("**", "")
            out.append(f"<p>{text}</p>")
        elif b[0] == "code":
            out.append(f"<pre>{html.escape(b[1])}</pre>")
        elif b[0] == "table":
            out.append("<table><tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in b[1])
                       + "</tr>")
            for r in b[2]:
                out.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r)
                           + "</tr>")
            out.append("</table>")
        elif b[0] == "img":
            with open(b[1], "rb") as f:
                data = base64.b64encode(f.read()).decode()
            out.append(f'<img class="plot" alt="{html.escape(b[2])}" '
                       f'src="data:image/svg+xml;base64,{data}">')
    out.append("</body></html>")
    return "\n".join(out)


def draw_plots(comparison: Dict[str, Any], out_dir: str) -> List[Tuple[str, str]]:
    sides = comparison["sides"]
    name = sides[0]["scenario"]["name"]
    plot_dir = os.path.join(out_dir, "plots")
    files = []

    def ok(its):
        return [it for it in its if it.get("status") == "ok" and not it.get("profiled")]

    spectra = [(r["side"]["name"], [it["latency_spectrum"] for it in ok(r["iterations"])
                                    if it.get("latency_spectrum")]) for r in sides]
    if any(s for _, s in spectra):
        files.append((plots.latency_curves(spectra, os.path.join(plot_dir, "latency.svg"),
                                           f"{name}: latency by percentile"),
                      "latency by percentile"))
    rps = [(r["side"]["name"], [(it["index"], it["rps"]) for it in ok(r["iterations"])])
           for r in sides]
    if any(p for _, p in rps):
        files.append((plots.rps_per_iteration(rps, os.path.join(plot_dir, "rps.svg"),
                                              f"{name}: requests/s per iteration"),
                      "requests per second per iteration"))
    cpu = [(r["side"]["name"], [{"samples": it.get("samples", []),
                                 "window": it.get("window_seconds", 0)}
                                for it in ok(r["iterations"])]) for r in sides]
    if any(c for _, c in cpu):
        files.append((plots.cpu_memory(cpu, os.path.join(plot_dir, "cpu_memory.svg"),
                                       f"{name}: server CPU and memory"),
                      "server CPU and memory over time"))
    stats = comparison.get("statistics", [])
    if stats:
        rows = []
        for entry in stats:
            for key, c in entry["metrics"].items():
                if c["delta_pct"] is not None:
                    label = metrics.BY_KEY[key].title
                    if len(stats) > 1:
                        label = f"{entry['name']}: {label}"
                    rows.append((label, c["delta_pct"], c["ci_low_pct"], c["ci_high_pct"],
                                 c["verdict"]))
        if rows:
            files.append((plots.deltas(rows, os.path.join(plot_dir, "deltas.svg"),
                                       f"{name}: change against {sides[0]['side']['name']}"),
                          "change of every metric against the baseline"))
    files.extend(_flame_graphs(comparison, plot_dir))
    return files


def _flame_graphs(comparison: Dict[str, Any], plot_dir: str) -> List[Tuple[str, str]]:
    files = []
    profiles = []
    for r in comparison["sides"]:
        stacks = next((it.get("folded_stacks") for it in r["iterations"]
                       if it.get("profiled") and it.get("folded_stacks")), None)
        profiles.append((r["side"]["name"], r["side"]["label"], stacks))
    comparison["profile_changes"] = []
    for name, label, stacks in profiles:
        if not stacks:
            continue
        path = os.path.join(plot_dir, f"flame-{label}.svg")
        os.makedirs(plot_dir, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(flame.flame_svg(stacks, f"{name}: server CPU profile"))
        with open(os.path.join(plot_dir, f"flame-{label}.folded"), "w", encoding="utf-8") as f:
            f.write(flame.folded_text(stacks))
        files.append((path, f"flame graph of {name}"))
    base = profiles[0][2] if profiles else None
    for name, label, stacks in profiles[1:]:
        if base and stacks:
            path = os.path.join(plot_dir, f"flame-diff-{label}.svg")
            with open(path, "w", encoding="utf-8") as f:
                f.write(flame.diff_svg(base, stacks, f"{name} vs {profiles[0][0]}: red grew, "
                                                     "blue shrank"))
            files.append((path, f"differential flame graph, {name} vs {profiles[0][0]}"))
            comparison["profile_changes"].append(
                {"name": name, "rows": flame.top_changes(base, stacks)})
    return files


def write_reports(comparison: Dict[str, Any], out_dir: str) -> Tuple[str, str]:
    """Draws the plots and writes report.md and report.html into out_dir."""
    plot_files = draw_plots(comparison, out_dir)
    blocks = build_blocks(comparison, plot_files)
    md_path = os.path.join(out_dir, "report.md")
    with open(md_path, "w", encoding="utf-8") as f:
        f.write(render_markdown(blocks, out_dir))
    html_path = os.path.join(out_dir, "report.html")
    with open(html_path, "w", encoding="utf-8") as f:
        f.write(render_html(blocks, f"sluice bench: {comparison['sides'][0]['scenario']['name']}"))
    return md_path, html_path


def terminal_text(comparison: Dict[str, Any]) -> str:
    """What the terminal shows at the end: the tables, without the plots."""
    blocks = [b for b in build_blocks(comparison, []) if b[0] != "img"]
    return render_markdown(blocks, ".")


def summary_markdown(comparison: Dict[str, Any]) -> str:
    """A compact table of a comparison for a results file: the machine, then one row per side
    with medians (RPS with its range over the iterations, server CPU per request split into user
    and kernel, system calls per request, p99) and, for every side after the first, the change of
    CPU per request and of RPS against the first with the 95% interval, p and whether it is
    significant (p < 0.05 and the interval excludes 0; `~` otherwise)."""
    sides = comparison["sides"]
    first = sides[0]
    stats_by_label = {s["label"]: s["metrics"] for s in comparison.get("statistics", [])}

    def med(side, key, digits):
        v = side["summary"].get(key, {}).get("median")
        return "-" if v is None else f"{v:,.{digits}f}"

    def change(label, key):
        m = stats_by_label.get(label, {}).get(key)
        if not m or m.get("delta_pct") is None:
            return "-"
        ci = ""
        if m.get("ci_low_pct") is not None:
            ci = f" [{m['ci_low_pct']:+.1f}, {m['ci_high_pct']:+.1f}]"
        # Neutral words: whether lower is better depends on the row (a peer, or a change).
        verdict = "~" if m["verdict"] == "~" else "significant"
        paired = " paired" if m.get("test") == "paired" else ""
        return f"{m['delta_pct']:+.1f}%{ci} p={_p(m['p_value'])}{paired} {verdict}"

    ref = first["side"]["name"]
    builds = []
    for s in sides:
        text = source_text(s["side"], 60)
        if text != "external command" and text not in builds:
            builds.append(text)
    lines = [
        f"Machine: {machine_line(first['environment'])}.",
        "Build: " + ("; ".join(builds) if builds else "external commands only") + ".",
        "",
        f"| side | RPS (median, range) | CPU µs/req | user | kernel | syscalls/req | p99 ms | "
        f"CPU/req vs {ref} | RPS vs {ref} |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for s in sides:
        rps = s["summary"].get("rps", {})
        rng = ""
        if rps.get("minimum") is not None:
            rng = f" ({rps['minimum'] / 1000:,.0f}k–{rps['maximum'] / 1000:,.0f}k)"
        label = s["side"]["label"]
        lines.append(
            f"| {s['side']['name']} | {med(s, 'rps', 0)}{rng} | {med(s, 'cpu_us_per_request', 3)} | "
            f"{med(s, 'user_us_per_request', 3)} | {med(s, 'kernel_us_per_request', 3)} | "
            f"{med(s, 'syscalls_per_request', 2)} | {med(s, 'p99_ms', 3)} | "
            f"{'(reference)' if s is first else change(label, 'cpu_us_per_request')} | "
            f"{'(reference)' if s is first else change(label, 'rps')} |")
    it = first["summary"].get("rps", {}).get("n", 0)
    sc = first["scenario"]
    lines += ["", f"{it} iterations a side, interleaved; warmup {sc['warmup']}, "
              f"measured {sc['duration']} each."]
    return "\n".join(lines) + "\n"
