"""What a result must say about where it came from, and the fingerprint that makes two results
comparable.

`capture()` records the machine (CPU model, cores, kernel, page-table isolation, the measured cost
of one system call), the toolchain (compiler, Bazel, the pinned Debian packages) and the source
(git sha and dirty flag). `fingerprint()` hashes the *pinned configuration*: everything that must
be identical on both sides of a comparison (the scenario without its variants, the build flags and
publish method, the machine, the toolchain, the load generator binary), and nothing that is meant
to differ (the source revision, the variant, the date). Two results whose fingerprints differ are
not compared unless forced, and `fingerprint_differences()` lists why.
"""

import copy
import hashlib
import json
import os
import platform
import re
import subprocess
from typing import Any, Dict, List, Optional

SCHEMA_VERSION = "sluice-bench/1"


def _run(cmd: List[str], cwd: Optional[str] = None, timeout: float = 30) -> str:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def page_table_isolation() -> str:
    """The kernel's Meltdown mitigation line ("Mitigation: PTI", "Not affected", ...)."""
    try:
        with open("/sys/devices/system/cpu/vulnerabilities/meltdown", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def memory_total_mb() -> int:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return 0


def measure_syscall_ns(tool: Optional[str], cpus: Optional[str]) -> Optional[float]:
    """The median cost of one getppid() call, from tools/syscall_cost (pinned like the server)."""
    if not tool or not os.path.exists(tool):
        return None
    cmd = ([ "taskset", "-c", cpus] if cpus else []) + [tool]
    m = re.search(r"syscall_ns=([0-9.]+)", _run(cmd, timeout=60))
    return float(m.group(1)) if m else None


def debian_versions(package_list: Optional[str], extra: List[str] = (),
                    pinned: bool = True) -> Dict[str, str]:
    """Installed versions of the packages in third_party/debian_packages.txt (and `extra`).

    pinned: those with a version pin; otherwise those pinned "*" (test peers such as Chromium that
    follow Debian's security updates and are never part of a benchmark's configuration).
    """
    packages = []
    if package_list and os.path.exists(package_list):
        with open(package_list, encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if len(fields) == 4 and not line.lstrip().startswith("#"):
                    if (fields[2] != "*") == pinned:
                        packages.append(fields[1])
    if pinned:
        packages.extend(p for p in extra if p not in packages)
    if not packages:
        return {}
    out = _run(["dpkg-query", "-W", "-f=${Package} ${Version}\\n"] + packages)
    versions = {}
    for line in out.splitlines():
        name, _, version = line.partition(" ")
        if version:
            versions[name] = version
    return versions


def git_state(repo: str) -> Dict[str, Any]:
    """{"sha", "dirty", "describe"} of the checkout at `repo` ("" when it is not git)."""
    sha = _run(["git", "rev-parse", "HEAD"], cwd=repo)
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo)
    return {"sha": sha, "dirty": bool(status), "subject": _run(
        ["git", "log", "-1", "--format=%s"], cwd=repo)}


def compiler_version() -> str:
    line = _run(["g++", "--version"]).splitlines()
    return line[0] if line else "unknown"


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def capture(repo: str, syscall_tool: Optional[str], server_cpus: Optional[str],
            extra_packages: List[str] = ()) -> Dict[str, Any]:
    """The environment block of a result (see the module comment)."""
    package_list = os.path.join(repo, "third_party", "debian_packages.txt")
    return {
        "machine": {
            "cpu_model": cpu_model(),
            "cores": os.cpu_count(),
            "memory_mb": memory_total_mb(),
            "kernel": platform.release(),
            "meltdown": page_table_isolation(),
            "hostname": platform.node(),
            "syscall_ns": measure_syscall_ns(syscall_tool, server_cpus),
        },
        "toolchain": {
            "compiler": compiler_version(),
            "debian": debian_versions(package_list, extra_packages),
            "debian_unpinned": debian_versions(package_list, pinned=False),
        },
        "driver": {"schema": SCHEMA_VERSION, **git_state(repo)},
    }


# ---------------------------------------------------------------------------------------------
# Fingerprints

def _pinned_scenario(scenario_data: Dict[str, Any]) -> Dict[str, Any]:
    """The scenario as pinned for every side: without names, descriptions, variants and retries
    (how often a failed iteration is run again does not change what is measured)."""
    data = copy.deepcopy(scenario_data)
    for key in ("name", "description", "variants", "variant", "retries"):
        data.pop(key, None)
    return data


def fingerprint_components(scenario_data: Dict[str, Any], environment: Dict[str, Any],
                           loadgen_sha256: str) -> Dict[str, Any]:
    machine = environment["machine"]
    return {
        "schema": SCHEMA_VERSION,
        "scenario": _pinned_scenario(scenario_data),
        "machine": {k: machine[k] for k in ("cpu_model", "cores", "kernel", "meltdown")},
        "toolchain": {k: environment["toolchain"][k] for k in ("compiler", "debian")},
        "loadgen_sha256": loadgen_sha256,
    }


def fingerprint(components: Dict[str, Any]) -> str:
    canonical = json.dumps(components, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def fingerprint_differences(a: Dict[str, Any], b: Dict[str, Any], prefix: str = "") -> List[str]:
    """Human lines naming each pinned value that differs: "scenario.duration: 10s vs 5s"."""
    diffs = []
    for key in sorted(set(a) | set(b)):
        path = f"{prefix}.{key}" if prefix else str(key)
        if key not in a:
            diffs.append(f"{path}: only in the second ({_short(b[key])})")
        elif key not in b:
            diffs.append(f"{path}: only in the first ({_short(a[key])})")
        elif isinstance(a[key], dict) and isinstance(b[key], dict):
            diffs.extend(fingerprint_differences(a[key], b[key], path))
        elif a[key] != b[key]:
            diffs.append(f"{path}: {_short(a[key])} vs {_short(b[key])}")
    return diffs


def _short(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."
