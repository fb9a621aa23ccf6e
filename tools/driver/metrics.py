"""The figures a side reports, each with its column title, the better direction and a format.

The first nine are crank's table, in its order (Description is the row label); the rest split
CPU per request into user and kernel time, which decides rankings between machines whose system
calls cost 0.1 µs and 1.2 µs.
"""

import dataclasses
from typing import Any, Callable, Dict, List, Optional


@dataclasses.dataclass(frozen=True)
class Metric:
    key: str
    title: str
    direction: int              # +1 higher is better, -1 lower is better, 0 neither
    fmt: Callable[[float], str]


def _int(v: float) -> str:
    return f"{v:,.0f}"


def _ms(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.1f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.4f}"


def _f1(v: float) -> str:
    return f"{v:.1f}"


def _f2(v: float) -> str:
    return f"{v:.2f}"


def _f3(v: float) -> str:
    return f"{v:.3f}"


SEED_TABLE = [
    Metric("rps", "RPS", +1, _int),
    Metric("cpu_pct", "CPU (%)", 0, _int),
    Metric("memory_mb", "Memory (MB)", -1, _int),
    Metric("avg_latency_ms", "Avg. Latency (ms)", -1, _ms),
    Metric("startup_ms", "Startup (ms)", -1, _ms),
    Metric("first_request_ms", "First Request (ms)", -1, _ms),
    Metric("latency_ms", "Latency (ms)", -1, _ms),
    Metric("errors", "Errors", -1, _int),
]

CPU_TABLE = [
    Metric("cpu_us_per_request", "CPU µs/req", -1, _f3),
    Metric("user_us_per_request", "user µs/req", -1, _f3),
    Metric("kernel_us_per_request", "kernel µs/req", -1, _f3),
    Metric("syscalls_per_request", "syscalls/req", -1, _f2),
    Metric("p99_ms", "p99 (ms)", -1, _ms),
]

ALL = SEED_TABLE + CPU_TABLE
BY_KEY = {m.key: m for m in ALL}


def _counts(it: Dict[str, Any], key: str) -> bool:
    """Whether an iteration's `key` is a sample: it succeeded, was not profiled, and has it."""
    return it.get("status") == "ok" and not it.get("profiled") and it.get(key) is not None


def values(iterations: List[Dict[str, Any]], key: str) -> List[float]:
    """`key` of every successful, unprofiled iteration that has it."""
    return [it[key] for it in iterations if _counts(it, key)]


def values_by_round(iterations: List[Dict[str, Any]], key: str) -> Dict[int, float]:
    """The same values as `values`, keyed by their iteration's round (its index)."""
    return {it["index"]: it[key] for it in iterations if _counts(it, key)}


def fmt(key: str, value: Optional[float]) -> str:
    if value is None or value != value:  # None or NaN
        return "-"
    return BY_KEY[key].fmt(value)
