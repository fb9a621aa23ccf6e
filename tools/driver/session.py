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
import signal
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


class Interrupted(Exception):
    """Ctrl-C during Session.run. `results`: the side results of the iterations that had
    finished (written, each marked "partial"), or [] when none had; `note` says how far it got.
    SIGINT stays ignored until restore() (the caller writes its reports first)."""

    def __init__(self, results: List[Dict[str, Any]], note: str, previous_handler=None):
        super().__init__(note)
        self.results = results
        self.note = note
        self.previous_handler = previous_handler

    def restore(self) -> None:
        if self.previous_handler is not None:
            try:
                signal.signal(signal.SIGINT, self.previous_handler)
            except ValueError:  # not the main thread
                pass
            self.previous_handler = None


class Stopped(Exception):
    """A mistake of the scenario's that an iteration found (runner.BadScenario, str(): `FILE:LINE:
    KEY: what is wrong`) ended Session.run at once: no retry, no further iteration, every process
    stopped. As with Interrupted, `results` are the side results of the iterations that had
    finished (written, each marked "partial" and "stopped"), or [] when none had; `note` says how
    far it got. The attempt that found the mistake is not part of them."""

    def __init__(self, results: List[Dict[str, Any]], note: str, problem: str):
        super().__init__(problem)
        self.results = results
        self.note = note
        self.problem = problem


def _ignore_sigint():
    try:
        return signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to protect
        return None


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
        """Builds and runs every side; their results (also written as result-LABEL.json).

        Interrupted on Ctrl-C, Stopped on a mistake of the scenario's that an iteration found:
        the iterations that finished are written as partial results."""
        try:
            return self._run(specs)
        except KeyboardInterrupt:
            self.progress.done()
            raise Interrupted([], "no iteration had finished", _ignore_sigint()) from None

    def _run(self, specs: List[SideSpec]) -> List[Dict[str, Any]]:
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
        records: Dict[str, List[Dict[str, Any]]] = {s.label: [] for s in sides}
        by_label = {s.label: s for s in sides}
        order = stats.interleaved_order([s.label for s in sides], data["iterations"])
        if self.options.profile:
            order += [(data["iterations"] + 1, s.label) for s in sides]
        interrupted, previous_handler = False, None
        bad: Optional[runner.BadScenario] = None
        # A Ctrl-C while the local agent starts stops it (runner.Agents); from here on, the
        # finally below does.
        self.agents = runner.Agents(self.loadgen, data["load"]["agents"],
                                    data["load"].get("cpus"), self.run_dir, self.progress)
        try:
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
        except KeyboardInterrupt:
            # What finished is kept; a second Ctrl-C must not cut the writing short.
            interrupted, previous_handler = True, _ignore_sigint()
        except runner.BadScenario as e:
            # Every iteration would fail the same way: no retry, none of the others; what
            # finished is kept as after a Ctrl-C.
            bad = e
        finally:
            self.agents.stop()
            self.progress.done()
        done = sum(len(r) for r in records.values())
        note = None
        if interrupted:
            if not done:
                raise Interrupted([], f"interrupted before any of {len(order)} iterations "
                                      "finished", previous_handler)
            note = (f"interrupted after {done} of {len(order)} iterations; the result is "
                    "partial")
        elif bad is not None:
            if not done:
                raise Stopped([], f"stopped before any of {len(order)} iterations finished",
                              str(bad))
            note = (f"stopped after {done} of {len(order)} iterations by a mistake in the "
                    "scenario; the result is partial")
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
            if note:
                result["partial"] = note
            if bad is not None:
                result["stopped"] = str(bad)
            result["summary"] = summarize(result)
            path = os.path.join(self.run_dir, f"result-{side.label}.json")
            write_json(path, result)
            results.append(result)
        if bad is not None:
            raise Stopped(results, note, str(bad))
        if note:
            raise Interrupted(results, note, previous_handler)
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


# ---------------------------------------------------------------------------------------------
# Checking saved files: a result or comparison read back must have the shape this module writes
# (the reports index into it freely). Each check returns what is wrong, or None.

class _Bad(Exception):
    pass


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _need(value, kind, where: str):
    ok = {"dict": lambda v: isinstance(v, dict), "list": lambda v: isinstance(v, list),
          "str": lambda v: isinstance(v, str), "int": lambda v: isinstance(v, int)
          and not isinstance(v, bool), "number": _is_number,
          "number?": lambda v: v is None or _is_number(v),
          "str?": lambda v: v is None or isinstance(v, str),
          "dict?": lambda v: v is None or isinstance(v, dict),
          "list?": lambda v: v is None or isinstance(v, list)}[kind](value)
    if not ok:
        names = {"dict": "an object", "list": "a list", "str": "a string", "int": "an integer",
                 "number": "a number", "number?": "a number or null",
                 "str?": "a string or null", "dict?": "an object or null",
                 "list?": "a list or null"}
        raise _Bad(f"{where} must be {names[kind]}, not {json.dumps(value)[:40]}")
    return value


def _field(obj: Dict, key: str, kind: str, where: str, required: bool = True):
    if key not in obj:
        if required:
            raise _Bad(f"{where}.{key} is missing" if where else f"{key} is missing")
        return None
    return _need(obj[key], kind, f"{where}.{key}" if where else key)


def _check_summary_stats(s, where: str) -> None:
    _need(s, "dict", where)
    _field(s, "n", "int", where)
    if s["n"]:
        for k in ("median", "mean", "stdev", "minimum", "maximum"):
            _field(s, k, "number?", where, required=k == "median")


def _check_side(r, where: str) -> None:
    _need(r, "dict", where or "the file")
    if r.get("kind") != "side":
        raise _Bad(f"{where + '.' if where else ''}kind is not \"side\"")
    if r.get("schema") != environment.SCHEMA_VERSION:
        raise _Bad(f"{where + '.' if where else ''}schema is not {environment.SCHEMA_VERSION}")
    pre = where
    scenario = _field(r, "scenario", "dict", pre)
    for k in ("name", "warmup", "duration"):
        _field(scenario, k, "str", f"{pre}.scenario" if pre else "scenario")
    side = _field(r, "side", "dict", pre)
    sw = f"{pre}.side" if pre else "side"
    for k in ("label", "name"):
        _field(side, k, "str", sw)
    _field(side, "variant", "dict?", sw, required=False)
    source = _field(side, "source", "dict", sw)
    for k in ("sha", "ref", "subject"):
        _field(source, k, "str?", f"{sw}.source", required=False)
    env = _field(r, "environment", "dict", pre)
    ew = f"{pre}.environment" if pre else "environment"
    machine = _field(env, "machine", "dict", ew)
    for k, kind in (("cpu_model", "str"), ("cores", "int"), ("memory_mb", "int"),
                    ("kernel", "str"), ("meltdown", "str"), ("syscall_ns", "number?")):
        _field(machine, k, kind, f"{ew}.machine", required=k != "syscall_ns")
    _field(_field(env, "toolchain", "dict", ew), "compiler", "str", f"{ew}.toolchain")
    fw = f"{pre}.fingerprint" if pre else "fingerprint"
    fp = _field(r, "fingerprint", "dict", pre)
    _field(fp, "hash", "str", fw)
    _field(fp, "components", "dict", fw)
    iterations = _field(r, "iterations", "list", pre)
    for i, it in enumerate(iterations):
        iw = f"{pre + '.' if pre else ''}iterations[{i}]"
        _need(it, "dict", iw)
        _field(it, "index", "int", iw)
        _field(it, "status", "str", iw)
        for m in metrics.ALL:
            _field(it, m.key, "number?", iw, required=False)
        for k in ("requests", "window_seconds", "socket_errors", "bad_responses",
                  "sampler_cpu_pct", "started_unix", "sequence"):
            _field(it, k, "number?", iw, required=False)
        for k in ("latency_spectrum", "samples", "failed_attempts"):
            _field(it, k, "list?", iw, required=False)
        for k in ("server_counters", "folded_stacks"):
            _field(it, k, "dict?", iw, required=False)
        _field(it, "error", "str?", iw, required=False)
    summary = _field(r, "summary", "dict", pre)
    for k, s in summary.items():
        _check_summary_stats(s, f"{pre + '.' if pre else ''}summary.{k}")


def _check_comparison(c) -> None:
    _need(c, "dict", "the file")
    if c.get("kind") != "comparison":
        raise _Bad("kind is not \"comparison\"")
    sides = _field(c, "sides", "list", "")
    if not sides:
        raise _Bad("sides is empty")
    for i, r in enumerate(sides):
        _check_side(r, f"sides[{i}]")
    fp = _field(c, "fingerprint", "dict", "", required=False)
    if fp is not None:
        _field(fp, "differences", "list", "fingerprint", required=False)
    for i, entry in enumerate(_field(c, "statistics", "list", "", required=False) or []):
        w = f"statistics[{i}]"
        _need(entry, "dict", w)
        _field(entry, "label", "str", w)
        _field(entry, "name", "str", w)
        _field(entry, "note", "str?", w, required=False)
        for key, m in _field(entry, "metrics", "dict", w).items():
            mw = f"{w}.metrics.{key}"
            if key not in metrics.BY_KEY:
                raise _Bad(f"{mw}: unknown metric")
            _need(m, "dict", mw)
            _field(m, "verdict", "str", mw)
            for k in ("delta_pct", "ci_low_pct", "ci_high_pct", "p_value"):
                _field(m, k, "number?", mw)
            for k in ("a", "b"):
                _check_summary_stats(_field(m, k, "dict", mw), f"{mw}.{k}")


def side_problem(data: Any) -> Optional[str]:
    """What makes `data` not a side result (result-*.json) this driver can read, or None."""
    try:
        _check_side(data, "")
    except _Bad as e:
        return str(e)
    return None


def comparison_problem(data: Any) -> Optional[str]:
    """What makes `data` not a comparison (comparison.json) this driver can read, or None."""
    try:
        _check_comparison(data)
    except _Bad as e:
        return str(e)
    return None
