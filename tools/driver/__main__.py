"""bench: sluice's benchmark driver. `./bazelw run //tools:bench -- --help`; tools/README.md.

Exit status: 0 done; 1 a build, an agent, the server or an iteration failed (results and reports
are still written); 2 bad usage, a bad scenario or result file, fingerprints that differ without
--force, or a mistake of the scenario's that an iteration found (the run stops at once: what
finished is kept as a partial result); 3 --fail-on-regression found a significant regression;
130 interrupted.
"""

import argparse
import datetime
import json
import os
import re
import sys
import traceback

from tools.driver import build
from tools.driver import children
from tools.driver import environment
from tools.driver import micro
from tools.driver import report
from tools.driver import runner
from tools.driver import session
from tools.driver.progress import Progress
from tools.driver.scenario import ScenarioError, load_scenario, parse_duration

VERSION = "sluice bench 1.0 (" + environment.SCHEMA_VERSION + ")"

EXAMPLES = """examples:
  bench run benchmarks/scenarios/plaintext_keepalive.yaml
  bench compare --variant two_locks --variant single_lock benchmarks/scenarios/h2_strategies.yaml
  bench compare --baseline main --branch WORKTREE benchmarks/scenarios/plaintext_keepalive.yaml
  bench compare bench-out/a/result-A.json bench-out/b/result-A.json
  bench micro --baseline HEAD~1 --branch HEAD //benchmarks:pipe_benchmark
  bench report bench-out/20261201-120000-h2_strategies/comparison.json
"""


class UsageError(Exception):
    pass


def _user_path(path: str) -> str:
    """A path the user typed: relative to where they ran `bazel run` (or the shell)."""
    if os.path.isabs(path):
        return path
    base = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
    return os.path.normpath(os.path.join(base, path))


def _repo(args, required: bool = True) -> str:
    """The sluice checkout: --repo, the workspace of `bazel run`, or the git checkout here.

    Not required (saved results only): the directory the user is in, for the output."""
    if args.repo:
        return os.path.abspath(_user_path(args.repo))
    ws = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if ws:
        return ws
    try:
        return build.repo_root(os.getcwd())
    except build.BuildError as e:
        if not required:
            return os.path.abspath(_user_path("."))
        raise UsageError(f"{e}; pass --repo") from None


def _find_input(path: str, repo: str) -> str:
    p = _user_path(path)
    if not os.path.exists(p) and not os.path.isabs(path) and os.path.exists(
            os.path.join(repo, path)):
        return os.path.join(repo, path)
    return p


def _out_dir(args, repo: str, name: str) -> str:
    """The run directory (--out or bench-out/DATE-NAME), checked but not made yet."""
    if args.out:
        path = os.path.abspath(_user_path(args.out))
        what = f"--out {args.out}"
    else:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = os.path.join(repo, "bench-out", f"{stamp}-{name}")
        what = f"the output directory {path}"
    _check_out_dir(path, what)
    return path


def _check_out_dir(path: str, what: str) -> None:
    """UsageError unless `path` is a directory or can be made one (by the nearest existing
    directory above it being writable)."""
    probe = path
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        if probe == path:
            raise UsageError(f"{what}: exists and is not a directory")
        raise UsageError(f"{what}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{what}: {probe} is not writable")


def _make_out_dir(path: str, what: str = "--out") -> None:
    """Makes the run directory; UsageError when the file system refuses (e.g. under /proc)."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{what} {path}: cannot make the directory: {e.strerror}") from None


def _check_refs(repo: str, refs) -> None:
    """UsageError unless `repo` is a git checkout that knows every ref (before anything is
    made or built)."""
    try:
        top = build.repo_root(repo)
    except build.BuildError:
        raise UsageError(f"{repo} is not a git checkout (building refs needs one; pass --repo)") \
            from None
    for ref in refs:
        if ref and ref != build.WORKTREE:
            try:
                build.resolve_ref(top, ref)
            except build.BuildError as e:
                raise UsageError(str(e)) from None


def _tools_dir() -> str:
    """Where the driver's helper binaries are (set by tools/bench.sh)."""
    return os.environ.get("SLUICE_BENCH_TOOLS", "")


def _load(args, repo):
    path = _find_input(args.scenario, repo)
    shown = os.path.relpath(path, repo) if path.startswith(repo + os.sep) else path
    # files[].source is read from each side's own tree: the checkout's only when no side is
    # built from a ref (a ref's worktree may have files the checkout lacks, and the reverse).
    refs = [getattr(args, n, None) for n in ("ref", "baseline", "branch")]
    from_refs = any(r and r != build.WORKTREE for r in refs)
    scenario = load_scenario(path, shown, source_root=None if from_refs else repo)
    scenario.path = path
    try:
        session.apply_overrides(scenario, args.iterations, args.duration, args.warmup,
                                getattr(args, "retries", None))
    except ValueError as e:
        raise UsageError(str(e)) from None
    return scenario


def _options(args, repo, out_dir, progress):
    loadgen = os.path.abspath(_user_path(args.loadgen)) if args.loadgen else None
    return session.Options(repo=repo, out_dir=out_dir, tools_dir=_tools_dir(),
                           loadgen=loadgen, profile=args.profile, progress=progress,
                           bazel_startup=_bazel_startup(args))


def _bazel_startup(args):
    root = getattr(args, "output_user_root", None)
    return [f"--output_user_root={os.path.abspath(_user_path(root))}"] if root else []


def _finish(comparison, out_dir, progress, args) -> int:
    session.write_json(os.path.join(out_dir, "comparison.json"), comparison)
    md, html = report.write_reports(comparison, out_dir)
    session.write_json(os.path.join(out_dir, "comparison.json"), comparison)
    if not args.quiet:
        print(report.terminal_text(comparison))
    progress.log(f"report: {md}")
    progress.log(f"report: {html}")
    failed = [it for r in comparison["sides"] for it in r["iterations"]
              if it.get("status") != "ok"]
    retried = [f"{r['side']['name']} #{it['index']}" for r in comparison["sides"]
               for it in r["iterations"] if it.get("failed_attempts")]
    if retried:
        progress.log(f"run again after a failure (retries): {', '.join(retried)}; the report "
                     f"keeps each failed attempt's reason")
    threshold = getattr(args, "fail_on_regression", None)
    if threshold is not None:
        lines = session.regressions(comparison, threshold)
        if lines:
            progress.log(f"regressions of {threshold:g}% or more:")
            for line in lines:
                progress.log("  " + line)
            return 3
    if failed:
        progress.log(f"{len(failed)} iteration(s) failed; see the report")
        return 1
    return 0


def cmd_run(args, progress) -> int:
    repo = _repo(args)
    scenario = _load(args, repo)
    if args.variant and len(args.variant) > 1:
        raise UsageError("run takes one --variant; to compare several use `bench compare`")
    variant = args.variant[0] if args.variant else None
    scenario.resolve_variant(variant)  # an unknown name fails before anything is built
    if args.ref:
        _check_refs(repo, [args.ref])
    out_dir = _out_dir(args, repo, scenario.name)
    _make_out_dir(out_dir)
    s = session.Session(scenario, _options(args, repo, out_dir, progress))
    name = variant or (args.ref or scenario.name)
    try:
        results = s.run([session.SideSpec("A", name, variant, args.ref)])
    except session.Interrupted as e:
        return _interrupted(e, out_dir, progress, args, single=True)
    except session.Stopped as e:
        return _stopped(e, out_dir, progress, args, single=True)
    session.write_json(os.path.join(out_dir, "result.json"), results[0])
    return _finish(session.compare_results(results, forced=False), out_dir, progress, args)


def _interrupted(e, out_dir, progress, args, single: bool) -> int:
    """Ctrl-C during the iterations: what finished is kept (marked partial), then exit 130."""
    progress.done()
    try:
        if not e.results:
            print(f"bench: {e.note}: no result written", file=sys.stderr)
            return 130
        if single:
            session.write_json(os.path.join(out_dir, "result.json"), e.results[0])
        comparison = session.compare_results(e.results, forced=False)
        comparison["interrupted"] = e.note
        _finish(comparison, out_dir, progress, args)
        print(f"bench: {e.note} (marked so in the results and the report): {out_dir}",
              file=sys.stderr)
        return 130
    finally:
        e.restore()


def _stopped(e, out_dir, progress, args, single: bool) -> int:
    """A mistake of the scenario's found in an iteration ended the run: what finished is kept
    (marked partial, as after a Ctrl-C), the mistake is the last line, then exit 2."""
    progress.done()
    if e.results:
        if single:
            session.write_json(os.path.join(out_dir, "result.json"), e.results[0])
        comparison = session.compare_results(e.results, forced=False)
        comparison["stopped"] = e.problem
        _finish(comparison, out_dir, progress, args)
        progress.log(f"{e.note} (marked so in the results and the report): {out_dir}")
    else:
        progress.log(f"{e.note}: no result written")
    print(f"bench: {e.problem}", file=sys.stderr)
    return 2


def _is_result_file(path: str) -> bool:
    return path.endswith(".json")


def cmd_compare(args, progress) -> int:
    inputs = args.inputs
    repo = _repo(args, required=not all(_is_result_file(p) for p in inputs))
    if len(inputs) >= 2 and all(_is_result_file(p) for p in inputs):
        if args.baseline or args.branch or args.variant:
            raise UsageError("comparing saved results takes no --baseline/--branch/--variant")
        if len(inputs) > 8:
            raise UsageError("compare takes at most 8 saved results")
        results = []
        for p in inputs:
            path = _find_input(p, repo)
            results.append(_read_result(path))
        labels = "ABCDEFGH"
        for i, r in enumerate(results):
            r["side"]["label"] = labels[i]
        comparison = session.compare_results(results, forced=args.force)
        if not comparison["fingerprint"]["match"] and not args.force:
            progress.log("refused: the results were not measured under the same pinned "
                         "configuration (fingerprints differ); --force compares them anyway "
                         "and marks the report. What differs:")
            for line in comparison["fingerprint"]["differences"]:
                progress.log("  " + line)
            return 2
        out_dir = _out_dir(args, repo, "compare")
        _make_out_dir(out_dir)
        return _finish(comparison, out_dir, progress, args)
    if len(inputs) != 1:
        raise UsageError("compare takes one SCENARIO (with --baseline/--branch or --variant "
                         "twice or more), or two or more saved result .json files")
    args.scenario = inputs[0]
    scenario = _load(args, repo)
    refs = bool(args.baseline or args.branch)
    if refs and not (args.baseline and args.branch):
        raise UsageError("--baseline and --branch go together")
    variants = args.variant or []
    if refs:
        if len(variants) > 1:
            raise UsageError("with --baseline/--branch, at most one --variant (used by both)")
        v = variants[0] if variants else None
        scenario.resolve_variant(v)
        specs = [session.SideSpec("A", args.baseline, v, args.baseline),
                 session.SideSpec("B", args.branch, v, args.branch)]
    else:
        if len(variants) < 2:
            raise UsageError("compare needs --baseline REF --branch REF, or --variant A "
                             "--variant B (known variants: "
                             + (", ".join(scenario.variant_names()) or "none") + ")")
        if len(set(variants)) != len(variants):
            raise UsageError("each --variant once")
        if len(variants) > 8:
            raise UsageError("compare takes at most 8 sides")
        for v in variants:
            scenario.resolve_variant(v)
        specs = [session.SideSpec("ABCDEFGH"[i], v, v, args.ref) for i, v in
                 enumerate(variants)]
    refs = [spec.ref for spec in specs if spec.ref]
    if refs:
        _check_refs(repo, refs)
    out_dir = _out_dir(args, repo, scenario.name)
    _make_out_dir(out_dir)
    s = session.Session(scenario, _options(args, repo, out_dir, progress))
    try:
        results = s.run(specs)
    except session.Interrupted as e:
        return _interrupted(e, out_dir, progress, args, single=False)
    except session.Stopped as e:
        return _stopped(e, out_dir, progress, args, single=False)
    return _finish(session.compare_results(results, forced=False), out_dir, progress, args)


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not JSON: not UTF-8 text (byte offset {e.start})") from None
    except ValueError as e:
        raise UsageError(f"{path}: not JSON: {e}") from None
    except RecursionError:
        raise UsageError(f"{path}: not JSON this driver reads: nested too deeply") from None


def _read_result(path: str):
    data = _read_json(path)
    problem = session.side_problem(data)
    if problem:
        raise UsageError(f"{path}: not a valid bench side result (result-*.json of "
                         f"{environment.SCHEMA_VERSION}): {problem}")
    return data


def _read_comparison(path: str):
    data = _read_json(path)
    problem = session.comparison_problem(data)
    if problem:
        raise UsageError(f"{path}: not a valid comparison.json: {problem}")
    return data


def _render(path: str, draw):
    try:
        return draw()
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise UsageError(f"{path}: not a valid comparison.json: cannot draw it "
                         f"({type(e).__name__}: {e})") from None


def cmd_report(args, progress) -> int:
    path = _user_path(args.comparison)
    comparison = _read_comparison(path)
    if args.out:
        out_dir = os.path.abspath(_user_path(args.out))
        _check_out_dir(out_dir, f"--out {args.out}")
    else:
        out_dir = os.path.dirname(path)
        _check_out_dir(out_dir, "the comparison's directory")
    _make_out_dir(out_dir)
    md, html = _render(path, lambda: report.write_reports(comparison, out_dir))
    print(_render(path, lambda: report.terminal_text(comparison)))
    progress.log(f"report: {md}")
    progress.log(f"report: {html}")
    return 0


def cmd_summary(args, progress) -> int:
    path = _user_path(args.comparison)
    comparison = _read_comparison(path)
    print(_render(path, lambda: report.summary_markdown(comparison)), end="")
    return 0


def cmd_micro(args, progress) -> int:
    items = args.inputs
    saved = len(items) == 2 and all(i.endswith(".json") for i in items)
    if not saved:
        if len(items) != 1 or not re.match(r"^//[^:]*:[^:]+$", items[0]):
            raise UsageError("micro takes one Bazel target (//pkg:benchmark) with --baseline "
                             "and --branch, or two google-benchmark .json files")
        if not (args.baseline and args.branch):
            raise UsageError("micro //target needs --baseline REF and --branch REF")
    repo = _repo(args, required=not saved)
    if saved and all(i.endswith(".json") for i in items):
        parts = []
        for p in items:
            path = _find_input(p, repo)
            try:
                parts.append(micro.samples_from_json(_read_json(path), path))
            except micro.MicroError as e:
                raise UsageError(str(e)) from None
        a, b = parts
        names = (os.path.basename(items[0]), os.path.basename(items[1]))
        header = [f"A = {items[0]}, B = {items[1]}"]
        out_dir = _out_dir(args, repo, "micro")
    else:
        _check_refs(repo, [args.baseline, args.branch])
        out_dir = _out_dir(args, repo, "micro")
        _make_out_dir(out_dir)
        flags = ["-c", "opt"] + (args.flags.split() if args.flags else [])
        a, b, sources = micro.run_refs(repo, items[0], args.baseline, args.branch, out_dir,
                                       args.rounds, args.repetitions, args.cpus, flags,
                                       args.bench_args, progress, _bazel_startup(args))
        names = (args.baseline, args.branch)
        env = environment.capture(repo, os.path.join(_tools_dir(), "syscall_cost"), args.cpus)
        header = [f"Target {items[0]}, built with `bazel build {' '.join(flags)}` at both refs "
                  f"and published identically (copied); {args.rounds} rounds interleaved A B, "
                  f"{args.repetitions} repetitions each"
                  + (f", pinned to CPUs {args.cpus}" if args.cpus else "") + ".",
                  f"A = {names[0]} ({sources['A']['sha'][:10]}), B = {names[1]} "
                  f"({sources['B']['sha'][:10]}).", "",
                  "Machine: " + report.machine_line(env)]
    _make_out_dir(out_dir)
    rows, only = micro.compare_samples(a, b)
    if not rows:
        raise UsageError("no benchmark name is present on both sides")
    text = micro.write_report(rows, only, names[0], names[1], out_dir, header)
    session.write_json(os.path.join(out_dir, "micro.json"), {"rows": rows, "only": only,
                                                             "a": a, "b": b})
    print(text)
    progress.log(f"report: {os.path.join(out_dir, 'report.md')}")
    if args.fail_on_regression is not None:
        bad = [r["name"] for r in rows if r["real_time"]["verdict"] == "regression"
               and abs(r["real_time"]["delta_pct"] or 0) >= args.fail_on_regression]
        if bad:
            progress.log("regressions: " + ", ".join(bad))
            return 3
    return 0


def _percent(text: str) -> float:
    m = re.match(r"^(\d+(?:\.\d+)?)%?$", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r} (e.g. 2%)")
    return float(m.group(1))


def _duration(text: str) -> str:
    try:
        parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _positive_duration(text: str) -> str:
    if parse_duration(_duration(text)) <= 0:
        raise argparse.ArgumentTypeError(f"must be longer than {text}")
    return text


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench", description="sluice's benchmark driver: scenarios, baseline vs branch "
        "under one pinned configuration, statistics, plots.", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=VERSION)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def common(sp):
        sp.add_argument("--out", metavar="DIR", help="run directory (default bench-out/DATE-NAME)")
        sp.add_argument("--output-user-root", metavar="DIR",
                        help="Bazel's --output_user_root for every build the driver runs")
        sp.add_argument("--repo", metavar="DIR", help="the sluice checkout (default: this one)")
        sp.add_argument("--quiet", action="store_true", help="no tables on stdout")

    def scenario_flags(sp):
        sp.add_argument("--iterations", type=int, metavar="N", help="override iterations")
        sp.add_argument("--retries", type=int, metavar="N",
                        help="run a failed iteration again up to N times (override retries)")
        sp.add_argument("--duration", type=_positive_duration, metavar="D",
                        help="override duration")
        sp.add_argument("--warmup", type=_duration, metavar="D", help="override warmup")
        sp.add_argument("--profile", action="store_true",
                        help="one extra profiled iteration per side (perf record), flame graphs")
        sp.add_argument("--loadgen", metavar="PATH",
                        help="use this loadgen binary instead of building //loadgen -c opt")
        sp.add_argument("--variant", action="append", metavar="NAME",
                        help="a variant of the scenario (compare: twice or more)")

    run = sub.add_parser("run", help="run one scenario (one side)",
                         description="Builds, runs the iterations, writes result.json and reports.")
    run.add_argument("scenario", metavar="SCENARIO")
    run.add_argument("--ref", metavar="REF",
                     help=f"build this git ref (or {build.WORKTREE}) in a worktree instead of "
                          "this checkout in place")
    common(run)
    scenario_flags(run)
    run.set_defaults(func=cmd_run)

    cmp_ = sub.add_parser("compare", help="baseline vs branch, variants, or saved results",
                          description="compare --baseline REF --branch REF SCENARIO | "
                          "compare --variant A --variant B SCENARIO | compare A.json B.json")
    cmp_.add_argument("inputs", nargs="+", metavar="SCENARIO|RESULT.json")
    cmp_.add_argument("--baseline", metavar="REF")
    cmp_.add_argument("--branch", metavar="REF")
    cmp_.add_argument("--ref", metavar="REF", help="for --variant: build this ref in a worktree")
    cmp_.add_argument("--force", action="store_true",
                      help="compare results whose fingerprints differ (marked in the report)")
    cmp_.add_argument("--fail-on-regression", type=_percent, metavar="P%",
                      help="exit 3 if a metric regressed significantly by P%% or more")
    common(cmp_)
    scenario_flags(cmp_)
    cmp_.set_defaults(func=cmd_compare)

    mic = sub.add_parser("micro", help="google-benchmark binaries of two refs",
                         description="micro --baseline REF --branch REF //pkg:benchmark [-- ARGS]"
                         " | micro A.json B.json")
    mic.add_argument("inputs", nargs="+", metavar="TARGET|A.json B.json")
    mic.add_argument("--baseline", metavar="REF")
    mic.add_argument("--branch", metavar="REF")
    mic.add_argument("--rounds", type=_positive_int, default=3, metavar="N",
                     help="alternating rounds A B (default 3)")
    mic.add_argument("--repetitions", type=_positive_int, default=5, metavar="N",
                     help="--benchmark_repetitions per round (default 5)")
    mic.add_argument("--cpus", metavar="LIST", help="pin the benchmark (taskset -c LIST)")
    mic.add_argument("--flags", metavar="'FLAGS'", help="more Bazel flags (after -c opt)")
    mic.add_argument("--fail-on-regression", type=_percent, metavar="P%")
    common(mic)
    mic.set_defaults(func=cmd_micro)

    rep = sub.add_parser("report", help="redraw the reports of a comparison.json")
    rep.add_argument("comparison", metavar="COMPARISON.json")
    rep.add_argument("--out", metavar="DIR")
    rep.add_argument("--quiet", action="store_true")
    rep.set_defaults(func=cmd_report)

    summ = sub.add_parser("summary", help="a compact Markdown table of a comparison.json",
                          description="One row per side: medians, CPU per request split into "
                          "user and kernel, and the change against the first side.")
    summ.add_argument("comparison", metavar="COMPARISON.json")
    summ.set_defaults(func=cmd_summary)
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    bench_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, bench_args = argv[:i], argv[i + 1:]
    p = parser()
    args = p.parse_args(argv)
    if not args.command:
        p.print_help()
        return 2
    if args.command == "micro":
        args.bench_args = bench_args
    elif bench_args:
        p.error("arguments after -- are only for `micro` (they go to the benchmark)")
    if getattr(args, "iterations", None) is not None and args.iterations < 1:
        p.error("--iterations must be at least 1")
    if getattr(args, "retries", None) is not None and args.retries < 0:
        p.error("--retries must be at least 0")
    progress = Progress(quiet=False)
    children.handle_sigint()
    try:
        return _main(args, progress)
    finally:
        # Whatever the way out: no process the driver started outlives it.
        children.stop_all()
        children.restore_sigint()


def _main(args, progress) -> int:
    try:
        return args.func(args, progress)
    except (UsageError, ScenarioError, micro.MicroError) as e:
        progress.done()
        print(f"bench: {e}", file=sys.stderr)
        return 2 if not isinstance(e, micro.MicroError) else 1
    except session.Interrupted as e:  # not caught by its command: nothing kept
        progress.done()
        e.restore()
        print(f"bench: {e.note}: no result written", file=sys.stderr)
        return 130
    except session.Stopped as e:  # not caught by its command: nothing kept
        progress.done()
        print(f"bench: {e.problem}", file=sys.stderr)
        return 2
    except (runner.RunError, build.BuildError) as e:
        progress.done()
        print(f"bench: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        progress.done()
        print("bench: interrupted", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001  (a bug of ours: say so, keep the trace out of the way)
        progress.done()
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "sluice-bench-error.log")
        with open(path, "w", encoding="utf-8") as f:
            traceback.print_exc(file=f)
        print(f"bench: internal error: {sys.exc_info()[1]!r} (trace in {path})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
