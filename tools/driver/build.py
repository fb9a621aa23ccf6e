"""Sources, builds and publishing: every side is produced the same way.

The trap this module exists to close: Kestrel's single-lock change measured a first request twice
as slow on the branch only because the branch was run from swapped-in output files and the
baseline was not. Here a side never chooses how it is built or published: `build_side()` takes
the scenario's one list of Bazel flags, one list of artifacts and one publish method, and applies
them identically to whatever source it is given. For a baseline-vs-branch comparison both sources
are git worktrees (never the developer's own tree, whose output base has other flags cached), each
with its own Bazel output base.

Refs: any git revision, or WORKTREE for the checkout with its uncommitted changes (snapshotted with
`git stash create`, so it too is built from a worktree; untracked files are not part of it).
"""

import dataclasses
import os
import shutil
import subprocess
import time
from typing import Callable, Dict, List, Optional

from tools.driver import children
from tools.driver import environment

WORKTREE = "WORKTREE"


class BuildError(Exception):
    pass


@dataclasses.dataclass
class Source:
    ref: str          # as the user named it
    sha: str          # the commit built (a stash commit for WORKTREE with changes)
    dirty: bool       # uncommitted changes are part of it
    path: str         # the tree to build
    subject: str = ""


def _git(repo: str, *args: str, check: bool = True) -> str:
    out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        raise BuildError(f"git {' '.join(args)}: {out.stderr.strip() or 'failed'}")
    return out.stdout.strip()


def repo_root(start: str) -> str:
    top = _git(start, "rev-parse", "--show-toplevel", check=False)
    if not top:
        raise BuildError(f"{start} is not inside a git checkout (compare needs git refs)")
    return top


def resolve_ref(repo: str, ref: str) -> Source:
    """The commit `ref` names. BuildError for a ref git does not know."""
    if ref == WORKTREE:
        head = _git(repo, "rev-parse", "HEAD")
        stash = _git(repo, "stash", "create")
        subject = _git(repo, "log", "-1", "--format=%s", head)
        return Source(ref, stash or head, bool(stash), path="", subject=subject)
    sha = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if not sha:
        raise BuildError(f"git does not know the ref {ref!r} (a branch, tag, sha, or {WORKTREE} "
                         "for the checkout with its uncommitted changes)")
    return Source(ref, sha, False, path="", subject=_git(repo, "log", "-1", "--format=%s", sha))


def untracked_files(repo: str) -> List[str]:
    out = _git(repo, "status", "--porcelain", check=False)
    return [line[3:] for line in out.splitlines() if line.startswith("?? ")]


def worktree(repo: str, source: Source) -> str:
    """A clean worktree of `source.sha` under .bench/worktrees/, created or reused."""
    base = os.path.join(repo, ".bench", "worktrees")
    path = os.path.join(base, source.sha[:12])
    if os.path.isdir(path):
        head = _git(path, "rev-parse", "HEAD", check=False)
        if head == source.sha and not _git(path, "status", "--porcelain", check=False):
            return path
        _git(repo, "worktree", "remove", "--force", path, check=False)
        shutil.rmtree(path, ignore_errors=True)
    os.makedirs(base, exist_ok=True)
    _git(repo, "worktree", "prune")
    _git(repo, "worktree", "add", "--detach", "--force", path, source.sha)
    return path


def bazel_build(tree: str, flags: List[str], targets: List[str], log_path: str,
                worktree_server: bool, startup: List[str] = (),
                on_tick: Optional[Callable[[float], None]] = None) -> Dict[str, str]:
    """Builds `targets` in `tree`; returns {label: absolute path of its executable}.

    The output goes to `log_path`; a failure raises BuildError with its last lines.
    worktree_server: the Bazel server of a driver-made worktree exits after a minute idle.
    startup: Bazel startup options for every call (e.g. --output_user_root=DIR).
    """
    startup = list(startup) + (["--max_idle_secs=60"] if worktree_server else [])
    # --symlink_prefix=/: the checkout's bazel-bin & co. keep pointing where its owner left them.
    cmd = ["bazel", *startup, "build", "--symlink_prefix=/", *flags, "--", *targets]
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + f"\n# in {tree}\n")
        log.flush()
        try:
            # SIGTERM: the client cancels the build and exits (its third SIGINT would kill the
            # Bazel server, and a Ctrl-C on the terminal has sent it one already).
            proc = children.start(cmd, group=False, stop_timeout=30, cwd=tree, stdout=log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env=_bazel_env())
        except OSError as e:
            raise BuildError(f"cannot run bazel: {e.strerror} (install bazel-bootstrap; "
                             "./bazelw does it)") from None
        try:
            while proc.poll() is None:
                if on_tick:
                    on_tick(time.monotonic() - started)
                time.sleep(0.5)
        finally:  # it has ended, unless the build was cut short (Ctrl-C)
            children.stop(proc)
    if proc.returncode != 0:
        raise BuildError(f"bazel build failed (exit {proc.returncode}) in {tree}:\n"
                         + tail(log_path, 25) + f"\n(whole log: {log_path})")
    return _executables(tree, flags, targets, startup)


def _executables(tree: str, flags: List[str], targets: List[str],
                 startup: List[str]) -> Dict[str, str]:
    """Where each built target's executable is, from `bazel cquery` with the build's flags."""
    expr = ('str(target.label) + " " + (target.files_to_run.executable.path '
            'if target.files_to_run.executable else "")')
    query = subprocess.run(["bazel", *startup, "cquery", "--symlink_prefix=/", *flags,
                            "set(" + " ".join(targets) + ")", "--output=starlark",
                            "--starlark:expr=" + expr], cwd=tree, capture_output=True, text=True,
                           env=_bazel_env(), check=False)
    root = subprocess.run(["bazel", *startup, "info", *flags, "execution_root"], cwd=tree,
                          capture_output=True, text=True, env=_bazel_env(), check=False)
    if query.returncode != 0 or root.returncode != 0:
        raise BuildError(f"bazel cquery/info failed in {tree}: "
                         + (query.stderr or root.stderr).strip()[-500:])
    found = {}
    for line in query.stdout.splitlines():
        label, _, path = line.strip().partition(" ")
        found[label] = path
    out = {}
    for target in targets:
        path = found.get(target) or found.get("@" + target)
        if not path:
            raise BuildError(f"{target} is not an executable target (no binary to publish)")
        out[target] = os.path.join(root.stdout.strip(), path)
    return out


def _bazel_env() -> Dict[str, str]:
    env = dict(os.environ)
    # A nested `bazel` run by `bazel run //tools:bench` must not believe it is the outer one.
    for key in ("BUILD_WORKSPACE_DIRECTORY", "BUILD_WORKING_DIRECTORY", "RUNFILES_DIR",
                "RUNFILES_MANIFEST_FILE", "JAVA_RUNFILES", "PYTHONPATH"):
        env.pop(key, None)
    return env


def publish(files: Dict[str, str], dest_dir: str, method: str) -> List[Dict]:
    """Publishes {label: built file} into dest_dir by `method`; returns what was published."""
    os.makedirs(dest_dir, exist_ok=True)
    published = []
    for label, src in files.items():
        if not os.path.isfile(src):
            raise BuildError(f"{label}: the build produced no file at {src}")
        dest = os.path.join(dest_dir, os.path.basename(src))
        if os.path.lexists(dest):
            os.remove(dest)
        if method == "copy":
            shutil.copy2(src, dest)
        elif method == "hardlink":
            try:
                os.link(os.path.realpath(src), dest)
            except OSError:
                shutil.copy2(src, dest)  # another file system: a copy is the closest
        elif method == "symlink":
            os.symlink(os.path.realpath(src), dest)
        else:
            raise BuildError(f"unknown publish method {method!r}")
        published.append({"label": label, "path": dest, "method": method,
                          "bytes": os.path.getsize(dest),
                          "sha256": environment.file_sha256(dest)})
    return published


def tail(path: str, lines: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return ""
