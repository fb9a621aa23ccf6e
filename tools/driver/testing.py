"""Synthetic side results for the driver's tests: the shape session.Session.run writes, with
values chosen by the test (so statistics and reports can be checked against known inputs)."""

import random
from typing import Dict, List, Optional

from tools.driver import environment
from tools.driver import session


def spectrum(median_ms: float) -> List[List[float]]:
    points = []
    for k in range(41):
        p = 100.0 * (1.0 - 10 ** (-k / 10.0))
        points.append([p, median_ms * 1e6 * (1 + k / 10.0)])
    points.append([100.0, median_ms * 1e6 * 6])
    return points


def iteration(side: str, index: int, rps: float, rng: random.Random, **overrides) -> Dict:
    samples = []
    user = system = 0.0
    for i in range(-2, 52):
        user += 0.06
        system += 0.03
        samples.append([i / 10.0, round(user, 3), round(system, 3), 6_000_000 + rng.randint(0, 100_000)])
    it = {
        "index": index, "side": side, "status": "ok", "profiled": False,
        "started_unix": 1_700_000_000 + index * 10 + (0 if side == "A" else 5),
        "finished_unix": 1_700_000_004 + index * 10 + (0 if side == "A" else 5),
        "rps": rps, "cpu_pct": 90 + rng.random(), "memory_mb": 6.0 + rng.random(),
        "avg_latency_ms": 0.5, "startup_ms": 8 + rng.random(), "first_request_ms": 2.0,
        "latency_ms": 0.2, "errors": 0, "socket_errors": 0, "bad_responses": 0,
        "requests": int(rps * 5), "window_seconds": 5.0, "p99_ms": 1.0,
        "cpu_us_per_request": 1e6 * 0.9 / rps, "user_us_per_request": 1e6 * 0.6 / rps,
        "kernel_us_per_request": 1e6 * 0.3 / rps, "latency_spectrum": spectrum(0.5),
        "samples": samples, "sampler_cpu_pct": 0.3,
    }
    it.update(overrides)
    return it


def side_result(label: str, name: str, rps_values: List[float], seed: int = 1,
                fingerprint: Optional[Dict] = None, **overrides) -> Dict:
    rng = random.Random(seed)
    scenario = {"name": "synthetic", "description": "synthetic results for a test",
                "warmup": "1s", "duration": "5s", "iterations": len(rps_values)}
    env = {"machine": {"cpu_model": "Test CPU", "cores": 2, "memory_mb": 4096, "kernel": "6.1",
                       "meltdown": "Not affected", "hostname": "test", "syscall_ns": 110.0},
           "toolchain": {"compiler": "g++ 12", "debian": {"libnghttp2-dev": "1.52.0-1"}},
           "driver": {"schema": environment.SCHEMA_VERSION, "sha": "", "dirty": False}}
    components = fingerprint or environment.fingerprint_components(scenario, env, "0" * 64)
    result = {
        "schema": environment.SCHEMA_VERSION, "kind": "side", "scenario_file": "synthetic.yaml",
        "scenario": scenario,
        "side": {"label": label, "name": name, "variant": {"name": name, "description": ""},
                 "source": {"ref": None, "sha": "0123456789abcdef", "dirty": False,
                            "subject": "test"}, "artifacts": []},
        "environment": env,
        "fingerprint": {"hash": environment.fingerprint(components), "components": components},
        "iterations": [iteration(label, i + 1, rps, rng, **overrides)
                       for i, rps in enumerate(rps_values)],
    }
    result["summary"] = session.summarize(result)
    return result
