"""A driver run: build and publish every side, start the agents, run the iterations interleaved,
and turn them into side results and a comparison.

Side results (result-A.json ...) are self-contained: the resolved scenario, the source, the
published artifacts with their hashes, the environment, the fingerprint, every iteration with its
samples and merged latency histogram, and per-metric summaries. A comparison embeds its side
results, so `bench report comparison.json` can redraw it anywhere.
"""

import dataclasses
import datetime
import json
import os
import shutil
import uuid
from typing import Any, Dict, List, Optional

from tools.driver import build
from tools.driver import environment
from tools.driver import metrics
from tools.driver import report
from tools.driver import runner
from tools.driver import stats
from tools.driver.scenario import Scenario, format_duration, parse_duration


@dataclasses.dataclass
class SideSpec:
    label: str
    name: str
    variant: Optional[str]
    ref: Optional[str]          # None: the driver's own checkout, built in place


@dataclasses.dataclass
class Options:
    repo: str                   # the driver's checkout (scenario files, loadgen)
    out_dir: str
    tools_dir: str              # where syscall_cost and proc_sampler are
    loadgen: Optional[str] = None
    profile: bool = False
    bazel_startup: List[str] = dataclasses.field(default_factory=list)
    progress: Any = None


class Session:
    def __init__(self, scenario: Scenario, options: Options):
        self.scenario = scenario
        self.options = options
        self.progress = options.progress
        self.run_dir = options.out_dir
        self.loadgen = ""
        self.agents: Optional[runner.Agents] = None
        os.makedirs(self.run_dir, exist_ok=True)
        shutil.copy(scenario.path, os.path.join(self.run_dir, "scenario.yaml"))

    def tool(self, name: str) -> str:
        """A helper binary of the driver (tools/syscall_cost, tools/proc_sampler)."""
        path = os.path.join(self.options.tools_dir, name)
        if not os.access(path, os.X_OK):
            raise runner.RunError(f"the driver's helper {path} is missing: run the driver with "
                                  "`./bazelw run //tools:bench`")
        return path

    # -- building --------------------------------------------------------------------------

    def _prepare_loadgen(self) -> str:
        tools_dir = os.path.join(self.run_dir, "tools")
        if self.options.loadgen:
            src = self.options.loadgen
            if not os.access(src, os.X_OK):
                raise runner.RunError(f"--loadgen {src}: not an executable file")
        else:
            self.progress.log("building the load generator (//loadgen, -c opt)")
            built = build.bazel_build(self.options.repo, ["-c", "opt"], ["//loadgen:loadgen"],
                                      os.path.join(self.run_dir, "build-loadgen.log"),
                                      worktree_server=False, startup=self.options.bazel_startup)
            src = built["//loadgen:loadgen"]
        published = build.publish({"//loadgen:loadgen": src}, tools_dir, "copy")
        self.loadgen_sha256 = published[0]["sha256"]
        return published[0]["path"]

    def _build_sides(self, specs: List[SideSpec]) -> List[runner.Side]:
        data = self.scenario.data
        flags = data["build"]["flags"]
        artifacts = data["build"]["artifacts"]
        method = data["build"]["publish"]
        in_place: Optional[Dict[str, str]] = None
        sides = []
        for spec in specs:
            resolved = self.scenario.resolve_variant(spec.variant)
            side_dir = os.path.join(self.run_dir, spec.label)
            os.makedirs(side_dir, exist_ok=True)
            if spec.ref is None:
                tree = self.options.repo
                state = environment.git_state(tree)
                source = {"ref": None, "sha": state["sha"], "dirty": state["dirty"],
                          "subject": state["subject"]}
            else:
                src = build.resolve_ref(self.options.repo, spec.ref)
                if src.dirty:
                    untracked = build.untracked_files(self.options.repo)
                    if untracked:
                        self.progress.log(f"note: {spec.ref} leaves out untracked files: "
                                          + ", ".join(untracked[:5])
                                          + (" ..." if len(untracked) > 5 else ""))
                tree = build.worktree(self.options.repo, src)
                source = {"ref": spec.ref, "sha": src.sha, "dirty": src.dirty,
                          "subject": src.subject}
            executables: Dict[str, str] = {}
            published: List[Dict] = []
            if artifacts:
                if spec.ref is None and in_place is not None:
                    files = in_place
                else:
                    what = f"{spec.label} ({spec.ref or 'this checkout'}"
                    what += f" at {source['sha'][:10]})" if source["sha"] else ")"
                    self.progress.log(f"building {what}: bazel build {' '.join(flags)} "
                                      f"{' '.join(artifacts)}")
                    log = os.path.join(self.run_dir, f"build-{spec.label}.log")
                    try:
                        files = build.bazel_build(
                            tree, flags, artifacts, log, worktree_server=spec.ref is not None,
                            startup=self.options.bazel_startup,
                            on_tick=lambda s, w=what: self.progress.status(
                                f"building {w}: {s:.0f} s"))
                    except build.BuildError as e:
                        raise runner.RunError(f"side {spec.label} ({spec.ref or 'this checkout'})"
                                              f" failed to build: {e}") from None
                    if spec.ref is None:
                        in_place = files
                published = build.publish(files, os.path.join(side_dir, "bin"), method)
                executables = {p["label"]: p["path"] for p in published}
            sides.append(runner.Side(label=spec.label, name=spec.name, scenario=resolved,
                                     side_dir=side_dir, executables=executables,
                                     source_dir=tree, source=source, artifacts=published))
        return sides

    # -- running ---------------------------------------------------------------------------

    def run(self, specs: List[SideSpec]) -> List[Dict[str, Any]]:
        data = self.scenario.data
        self.progress.log(f"scenario {self.scenario.name}: {len(specs)} side(s), "
                          f"{data['iterations']} iteration(s) each, warmup {data['warmup']}, "
                          f"measured {data['duration']}; output in {self.run_dir}")
        server_cpus = data["server"].get("cpus")
        env = environment.capture(self.options.repo, self.tool("syscall_cost"), server_cpus)
        sc = env["machine"]["syscall_ns"]
        self.progress.log(f"machine: {env['machine']['cpu_model']}, {env['machine']['cores']} "
                          f"cores; one system call costs "
                          + (f"{sc / 1000:.3f} µs" if sc else "? (tools/syscall_cost missing)"))
        if data["syscalls"] or self.options.profile:
            from tools.driver import perf
            why = perf.perf_available()
            if why:
                raise runner.RunError(f"{'--profile' if self.options.profile else 'syscalls'}"
                                      f" needs perf: {why}")
        self.loadgen = self._prepare_loadgen()
        sides = self._build_sides(specs)
        components = environment.fingerprint_components(data, env, self.loadgen_sha256)
        fp = {"hash": environment.fingerprint(components), "components": components}
        self.agents = runner.Agents(self.loadgen, data["load"]["agents"],
                                    data["load"].get("cpus"), self.run_dir, self.progress)
        records: Dict[str, List[Dict[str, Any]]] = {s.label: [] for s in sides}
        by_label = {s.label: s for s in sides}
        try:
            order = stats.interleaved_order([s.label for s in sides], data["iterations"])
            if self.options.profile:
                order += [(data["iterations"] + 1, s.label) for s in sides]
            # Every iteration names this run and its place in it, so that pairing by round
            # (ran_in_rounds) reads the order they ran in, not wall-clock times a clock step
            # could reorder.
            run_id = uuid.uuid4().hex
            for sequence, (index, label) in enumerate(order):
                side = by_label[label]
                profiled = index > data["iterations"]
                context: Dict[str, Any] = {"run_id": run_id, "sequence": sequence}
                record = runner.run_iteration(self, side, index, profile=profiled,
                                              context=context)
                failed_attempts: List[Dict[str, Any]] = []
                while record["status"] != "ok" and len(failed_attempts) < data["retries"]:
                    reason = (record.get("error") or "unknown error").splitlines()[0]
                    self.progress.log(f"iteration {index} of {side.name} failed ({reason}); "
                                      f"running it again")
                    failed_attempts.append({k: record.get(k) for k in
                                            ("error", "exit_status", "dir", "started_unix")})
                    context["failed_attempts"] = list(failed_attempts)
                    record = runner.run_iteration(self, side, index, profile=profiled,
                                                  attempt=len(failed_attempts), context=context)
                records[label].append(record)
                row = report.seed_row(f"{side.name} #{index}" + (" (profiled)" if profiled
                                                                  else ""), record)
                self.progress.log(" | ".join(row[:1] + [f"{h} {v}" for h, v in
                                                        zip(report.seed_header()[1:], row[1:])]))
                if record["status"] != "ok":
                    self.progress.log(f"iteration {index} of {side.name} FAILED: "
                                      f"{record['error']}")
        finally:
            self.agents.stop()
            self.progress.done()
        results = []
        for side in sides:
            result = {
                "schema": environment.SCHEMA_VERSION,
                "kind": "side",
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                "scenario_file": self.scenario.path,
                "scenario": side.scenario,
                "side": {"label": side.label, "name": side.name,
                         "variant": side.scenario.get("variant"), "source": side.source,
                         "artifacts": side.artifacts},
                "environment": env,
                "fingerprint": fp,
                "iterations": records[side.label],
            }
            result["summary"] = summarize(result)
            path = os.path.join(self.run_dir, f"result-{side.label}.json")
            write_json(path, result)
            results.append(result)
        return results


def summarize(result: Dict[str, Any]) -> Dict[str, Any]:
    out = {}
    for m in metrics.ALL:
        v = metrics.values(result["iterations"], m.key)
        out[m.key] = dataclasses.asdict(stats.summarize(v)) if v else {"n": 0}
    return out


def ran_in_rounds(a: List[Dict[str, Any]], b: List[Dict[str, Any]]) -> bool:
    """True if two sides' iterations ran interleaved by round, as one `compare` runs them: every
    iteration of round i (failed ones too) started before any of round i + 1. Results of separate
    runs compared from their files did not, and are not paired. Profiled iterations (one extra
    round at the end) are left out.

    The order is the run's own (run_id and sequence, written by Session.run); files written
    before those existed are ordered by their wall-clock start times."""
    its = [it for it in a + b if not it.get("profiled")]
    if not its or any(it.get("index") is None for it in its):
        return False
    if all(it.get("run_id") is not None and it.get("sequence") is not None for it in its):
        if len({it["run_id"] for it in its}) != 1:
            return False
        order = sorted(its, key=lambda it: it["sequence"])
    elif any(it.get("run_id") is not None for it in its):
        return False  # one side from a run that records its order, the other not: not one run
    elif any(it.get("started_unix") is None for it in its):
        return False
    else:
        order = sorted(its, key=lambda it: it["started_unix"])
    rounds = [it["index"] for it in order]
    return rounds == sorted(rounds)


def compare_results(results: List[Dict[str, Any]], forced: bool) -> Dict[str, Any]:
    """The comparison of results[1:] against results[0] (see the module comment)."""
    base = results[0]
    differences = []
    for r in results[1:]:
        if r["fingerprint"]["hash"] != base["fingerprint"]["hash"]:
            differences += environment.fingerprint_differences(
                base["fingerprint"]["components"], r["fingerprint"]["components"])
    comparison = {
        "schema": environment.SCHEMA_VERSION,
        "kind": "comparison",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "sides": results,
        "fingerprint": {"match": not differences, "forced": bool(differences) and forced,
                        "differences": differences},
        "statistics": [],
    }
    for r in results[1:]:
        entry = {"label": r["side"]["label"], "name": r["side"]["name"], "metrics": {}}
        in_rounds = ran_in_rounds(base["iterations"], r["iterations"])
        for m in metrics.ALL:
            if in_rounds:
                a = metrics.values_by_round(base["iterations"], m.key)
                b = metrics.values_by_round(r["iterations"], m.key)
                c = stats.compare_rounds(a, b, m.direction) if a and b else None
            else:
                a = metrics.values(base["iterations"], m.key)
                b = metrics.values(r["iterations"], m.key)
                c = stats.compare(a, b, m.direction) if a and b else None
            if c is not None:
                entry["metrics"][m.key] = dataclasses.asdict(c)
        entry["note"] = stats.min_iterations_note(
            len(metrics.values(base["iterations"], "rps")),
            len(metrics.values(r["iterations"], "rps")))
        comparison["statistics"].append(entry)
    return comparison


def regressions(comparison: Dict[str, Any], threshold_pct: float) -> List[str]:
    """Significant regressions of at least threshold_pct, as lines for the CI log. A regression
    from a reference median of 0 (errors where there were none) has no relative size and counts
    as larger than any threshold."""
    lines = []
    for entry in comparison["statistics"]:
        for key, c in entry["metrics"].items():
            if c["verdict"] != "regression":
                continue
            title = metrics.BY_KEY[key].title
            if c["delta_pct"] is None:
                size = f"{c['a']['median']:g} -> {c['b']['median']:g}"
            elif abs(c["delta_pct"]) >= threshold_pct:
                size = f"{c['delta_pct']:+.2f}%"
            else:
                continue
            lines.append(f"{entry['name']}: {title} {size} (p = {c['p_value']:.3f})")
    return lines


def write_json(path: str, data: Any) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, default=str)
        f.write("\n")
    os.replace(tmp, path)


def apply_overrides(scenario: Scenario, iterations: Optional[int], duration: Optional[str],
                    warmup: Optional[str], retries: Optional[int] = None) -> None:
    """Command-line overrides become part of the pinned configuration (and the fingerprint),
    retries excepted."""
    if iterations is not None:
        scenario.data["iterations"] = iterations
    if retries is not None:
        scenario.data["retries"] = retries
    if duration is not None:
        scenario.data["duration"] = format_duration(parse_duration(duration))
    if warmup is not None:
        scenario.data["warmup"] = format_duration(parse_duration(warmup))
