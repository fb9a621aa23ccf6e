"""One measured iteration of one side, and the load agents every iteration goes through.

An iteration, in order (crank's sequence):
  1. start the server (pinned with taskset, its own session so its whole tree can be stopped);
  2. startup: exec -> the ready line (`ready: line`) or -> the port accepting (`ready: port`);
     the port-accepting time is recorded for every server whose port is known in advance, the
     ready line for every server that prints one;
  3. first request: one request on a new connection right after ready, then the no-load
     latency (the mean of a few more on one connection);
  4. warmup and the measured load, one loadgen run driven through the agents (the controller:
     `loadgen --agents ...`), whose result says when the measured period began;
  5. the server's CPU and working set sampled every 100 ms from /proc all along, cut to the
     measured period afterwards; system calls (perf stat) and a profile (perf record) when asked;
  6. stop: SIGTERM to the server's process group, SIGKILL after the scenario's stop_timeout.
A server that exits before it is asked to, or a load run that fails, fails the iteration: the
result says why (with the tail of the server's stderr) and the other iterations go on. A mistake
of the scenario's that only an iteration finds, and that every iteration would hit the same way
(BadScenario), ends the whole run instead.
"""

import dataclasses
import errno
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from tools.driver import children
from tools.driver import perf
from tools.driver import probe
from tools.driver import procstat
from tools.driver.build import tail
from tools.driver.scenario import format_duration, key_text, parse_duration

HOST = "127.0.0.1"


class RunError(Exception):
    """A failure that ends the whole driver run (not just one iteration)."""


class IterationFailed(Exception):
    pass


class BadScenario(IterationFailed):
    """A mistake of the scenario's own that an iteration found and that every iteration of the
    run would hit the same way, whatever the server does: an unknown {placeholder} in a published
    file or in args, a published file that cannot be read, a server target that is not among
    build.artifacts, loadgen refusing its arguments (exit 2: a bad flag in load.args). The run is
    not retried or continued (Session.run ends it, exit 2). str(): `FILE:LINE: KEY: what is
    wrong`, naming the key to fix."""


def _scenario_key(session, side: "Side", *key) -> Tuple[str, str]:
    """(FILE:LINE, key text) of `key`, a path into the side's resolved scenario, mapped back to
    where the scenario file sets it: a variant's server, server_args and helpers are applied to
    the base by Scenario.resolve_variant."""
    base = session.scenario.data
    variant = (side.scenario.get("variant") or {}).get("name")
    spec = (base["variants"].get(variant) or {}) if variant else {}
    own_server = spec.get("server") or {}
    key = tuple(key)
    if key[:2] == ("server", "args") and len(key) > 2:
        first = own_server["args"] if "args" in own_server else base["server"]["args"]
        if key[2] >= len(first):
            key = ("variants", variant, "server_args", key[2] - len(first)) + key[3:]
        elif "args" in own_server:
            key = ("variants", variant, "server") + key[1:]
    elif key[:1] == ("server",) and len(key) > 1 and key[1] in own_server:
        key = ("variants", variant) + key
    elif key[:1] == ("helpers",) and len(key) > 1 and key[1] >= len(base["helpers"]):
        key = ("variants", variant, "helpers", key[1] - len(base["helpers"])) + key[2:]
    return session.scenario.where(*key), key_text(key)


def _bad(session, side: "Side", key: Tuple, what: str) -> BadScenario:
    where, text = _scenario_key(session, side, *key)
    return BadScenario(f"{where}: {text}: {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _taskset(cpus: Optional[str]) -> List[str]:
    return ["taskset", "-c", cpus] if cpus else []


def make_tls_files(directory: str) -> Dict[str, str]:
    """A self-signed P-256 certificate for localhost (openssl CLI), for peers that need files."""
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    if not os.path.exists(cert):
        out = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                              "ec_paramgen_curve:P-256", "-nodes", "-days", "7", "-subj",
                              "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                              "-keyout", key, "-out", cert], capture_output=True, text=True,
                             check=False)
        if out.returncode != 0:
            raise RunError("cannot make a TLS certificate with openssl: " + out.stderr[-300:])
    return {"tls_cert": cert, "tls_key": key}


# ---------------------------------------------------------------------------------------------
# Agents

class Agents:
    """The loadgen agents of a run: the scenario's, or one local agent started here."""

    def __init__(self, loadgen: str, addresses: List[str], cpus: Optional[str], run_dir: str,
                 progress):
        self.loadgen = loadgen
        self.cpus = cpus
        self.local: Optional[subprocess.Popen] = None
        if addresses:
            self.token = os.environ.get("LOADGEN_TOKEN", "")
            if not self.token:
                raise RunError("load.agents names remote agents: put their token in "
                               "LOADGEN_TOKEN")
            for address in addresses:
                host, _, port = address.rpartition(":")
                try:
                    with socket.create_connection((host.strip("[]"), int(port)), timeout=3):
                        pass
                except OSError as e:
                    raise RunError(f"agent {address} is unreachable: "
                                   f"{e.strerror or e}") from None
            self.addresses = list(addresses)
            return
        self.token = secrets.token_hex(16)
        stdout_path = os.path.join(run_dir, "agent.stdout")
        stderr_path = os.path.join(run_dir, "agent.stderr")
        self._stdout = open(stdout_path, "w+", encoding="utf-8")
        self._stderr = open(stderr_path, "w", encoding="utf-8")
        env = dict(os.environ, LOADGEN_TOKEN=self.token)
        cmd = _taskset(cpus) + [loadgen, "agent", "--listen", f"{HOST}:0", "--max-duration",
                                "1h"]
        self.local = children.start(cmd, group=True, stdout=self._stdout, stderr=self._stderr,
                                    env=env, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                self._stdout.seek(0)
                m = re.search(r"agent listening address=(\S+)", self._stdout.read())
                if m:
                    self.addresses = [m.group(1)]
                    progress.log(f"local load agent on {self.addresses[0]}"
                                 + (f" (CPUs {cpus})" if cpus else ""))
                    return
                if children.ended(self.local):
                    break
                time.sleep(0.02)
        except BaseException:  # Ctrl-C while it starts: it must not outlive the driver
            self.stop()
            raise
        self.stop()
        raise RunError("the local loadgen agent did not start:\n" + tail(stderr_path, 10))

    def stop(self) -> None:
        if self.local:
            children.stop(self.local, 10)


def excerpt(path: str, head: int = 6, last: int = 12) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().rstrip().splitlines()
    except OSError:
        return ""
    if len(lines) <= head + last:
        return "\n".join(lines)
    return "\n".join(lines[:head] + [f"[... {len(lines) - head - last} lines ...]"]
                     + lines[-last:])


# ---------------------------------------------------------------------------------------------
# The server process

class Server:
    def __init__(self, cmd: List[str], cwd: str, env: Dict[str, str], ready: str,
                 port: Optional[int], stop_timeout: float = 10.0):
        self.stdout_path = os.path.join(cwd, "server.stdout")
        self.stderr_path = os.path.join(cwd, "server.stderr")
        self._stderr = open(self.stderr_path, "w", encoding="utf-8")
        self.ready_mode = ready
        self.port = port
        self.ready_line: Optional[str] = None
        self.ready_line_at: Optional[float] = None
        self.port_at: Optional[float] = None
        self._ready = threading.Event()
        self._stdout_closed = False
        self.started = time.perf_counter()
        try:
            self.proc = children.start(cmd, group=True, stop_timeout=stop_timeout, cwd=cwd,
                                       env=env, stdout=subprocess.PIPE, stderr=self._stderr,
                                       stdin=subprocess.DEVNULL)
        except OSError as e:
            self._stderr.close()
            raise IterationFailed(f"cannot start the server {cmd[0]}: {e.strerror}") from None
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        self._poller = None
        if port is not None:
            self._poller = threading.Thread(target=self._poll_port, daemon=True)
            self._poller.start()

    def _read_stdout(self) -> None:
        with open(self.stdout_path, "wb") as out:
            for line in self.proc.stdout:
                if self.ready_line is None and line.startswith(b"ready "):
                    self.ready_line_at = time.perf_counter()
                    self.ready_line = line.decode(errors="replace").strip()
                    if self.ready_mode == "line":
                        self._ready.set()
                out.write(line)
                out.flush()
        self._stdout_closed = True
        self._ready.set()  # stdout closed: the process is gone, wake the waiter

    def _poll_port(self) -> None:
        while not children.ended(self.proc):
            if probe.port_accepts(HOST, self.port):
                self.port_at = time.perf_counter()
                if self.ready_mode == "port":
                    self._ready.set()
                return
            time.sleep(0.001)
        self._ready.set()

    def wait_ready(self, timeout: float) -> None:
        """Returns once ready; IterationFailed if the process exits first or time runs out."""
        self._ready.wait(timeout)
        ready_at = self.ready_line_at if self.ready_mode == "line" else self.port_at
        if ready_at is not None:
            if self.port is None and self.ready_line:
                m = re.search(r"address=\S*:(\d+)\b", self.ready_line)
                if not m:
                    raise IterationFailed(f"the ready line names no address=HOST:PORT: "
                                          f"{self.ready_line!r}")
                self.port = int(m.group(1))
            if self._poller:
                self._poller.join(timeout=2)
            return
        if self._stdout_closed:
            # It closed its stdout: it is exiting; let it finish to report its status (not
            # reaped: its group is killed at the stop, while its pid is still its own).
            children.wait_ended(self.proc, 5)
        if children.ended(self.proc):
            raise IterationFailed(f"the server exited with status "
                                  f"{children.exit_status(self.proc)} before it was ready"
                                  + self.stderr_tail())
        what = "a ready line on stdout" if self.ready_mode == "line" else f"port {self.port}"
        raise IterationFailed(f"the server was not ready after {timeout:g} s (waited for "
                              f"{what})" + self.stderr_tail())

    def ms_since_start(self, t: Optional[float]) -> Optional[float]:
        return None if t is None else (t - self.started) * 1e3

    def alive(self) -> bool:
        return not children.ended(self.proc)

    def stderr_tail(self) -> str:
        """The server's stderr for an error message: all of it if short, else its first and last
        lines (a usage text after an error puts the error first)."""
        self._stderr.flush()
        text = excerpt(self.stderr_path)
        return ("\n--- server stderr ---\n" + text) if text else ""

    def stop(self, timeout: float) -> Optional[int]:
        """SIGTERM to the whole process group, then SIGKILL (children may outlive a crashed
        master: what is left of the group is killed too). The exit status."""
        status = children.stop(self.proc, timeout)
        self._reader.join(timeout=5)
        self._stderr.close()
        return status


# ---------------------------------------------------------------------------------------------
# Helpers: processes a scenario runs next to the server (an OTLP collector, Prometheus)

def _publish_files(session, side: "Side", key: Tuple, files, it_dir: str,
                   values: Dict[str, str]) -> None:
    """Renders `files` (the side's scenario key `key`) into the iteration's directory (the port
    changes every iteration). BadScenario for a file that cannot be read or names an unknown
    placeholder: the same in every iteration."""
    published = {}
    for i, f in enumerate(files):
        dest = os.path.join(it_dir, f.get("as") or os.path.basename(f["source"]))
        values["file:" + os.path.basename(dest)] = dest
        published[dest] = (i, f["source"], os.path.join(side.source_dir, f["source"]))
    for dest, (i, source, src) in published.items():
        try:
            with open(src, "rb") as fh:
                raw = fh.read()
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES):
                # The machine's trouble (EMFILE, EIO...), not the scenario's: this iteration's.
                raise IterationFailed(f"files: cannot read {src}: {e.strerror}") from None
            raise _bad(session, side, key + (i, "source"),
                       f"cannot read {src}: {e.strerror}") from None
        try:
            # Text gets its placeholders filled in; anything else is copied byte for byte.
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            try:
                raw = _render(text, values).encode("utf-8")
            except _UnknownPlaceholder as e:
                raise _bad(session, side, key + (i, "source"), f"{source}: {e}") from None
        try:
            with open(dest, "wb") as fh:
                fh.write(raw)
        except OSError as e:
            raise IterationFailed(f"files: cannot write {dest}: {e.strerror}") from None


class Helper:
    def __init__(self, spec: Dict[str, Any], it_dir: str, values: Dict[str, str],
                 args: List[str]):
        """`args`: the helper's args, rendered (_render_args)."""
        self.name = spec["name"]
        self.port = int(values[f"port:{self.name}"])
        exe = spec["command"]
        if not os.path.isabs(exe):
            exe = shutil.which(exe) or shutil.which(exe, path="/usr/sbin:/sbin") or exe
        cmd = _taskset(spec.get("cpus")) + [exe] + args
        self.log_path = os.path.join(it_dir, f"helper-{self.name}.log")
        self._log = open(self.log_path, "w", encoding="utf-8")
        try:
            self.proc = children.start(cmd, group=True, cwd=it_dir, stdout=self._log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        except OSError as e:
            self._log.close()
            raise IterationFailed(f"helper {self.name}: cannot start {cmd[0]}: "
                                  f"{e.strerror}") from None
        self.uses_port = any(f"{{port:{self.name}}}" in a for a in spec["args"])
        self.timeout = parse_duration(spec["ready_timeout"])

    def wait_ready(self) -> None:
        if not self.uses_port:
            return
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if children.ended(self.proc):
                raise IterationFailed(f"helper {self.name} exited with status "
                                      f"{children.exit_status(self.proc)}:\n"
                                      + excerpt(self.log_path))
            if probe.port_accepts(HOST, self.port):
                return
            time.sleep(0.01)
        raise IterationFailed(f"helper {self.name} did not accept on port {self.port} within "
                              f"{self.timeout:g} s")

    def stop(self) -> None:
        children.stop(self.proc, 10)
        self._log.close()


# ---------------------------------------------------------------------------------------------
# One iteration

@dataclasses.dataclass
class Side:
    label: str                 # "A", "B", ...
    name: str                  # what the reports call it (variant name or ref)
    scenario: Dict[str, Any]   # the scenario with this side's variant applied
    side_dir: str
    executables: Dict[str, str]  # label -> published executable
    source_dir: str            # the tree its files come from
    source: Dict[str, Any]     # {"ref", "sha", "dirty", "subject"}
    artifacts: List[Dict[str, Any]] = dataclasses.field(default_factory=list)


class _UnknownPlaceholder(Exception):
    pass


def _render(text: str, values: Dict[str, str]) -> str:
    def sub(m):
        key = m.group(1)
        if key not in values:
            raise _UnknownPlaceholder(f"unknown placeholder {{{key}}} (known: "
                                      f"{', '.join(sorted(values))})")
        return values[key]
    return re.sub(r"\{([a-z_]+(?::[A-Za-z0-9_.-]+)?)\}", sub, text)


def _render_args(session, side: "Side", key: Tuple, args: List[str],
                 values: Dict[str, str]) -> List[str]:
    """`args` (the side's scenario key `key`) with their placeholders filled in; BadScenario
    naming the argument with an unknown one."""
    out = []
    for i, a in enumerate(args):
        try:
            out.append(_render(a, values))
        except _UnknownPlaceholder as e:
            raise _bad(session, side, key + (i,), str(e)) from None
    return out


def _uses(scenario: Dict[str, Any], placeholder: str, source_dir: str) -> bool:
    server = scenario["server"]
    if any(placeholder in a for a in server["args"]):
        return True
    for f in list(server["files"]) + [f for h in scenario["helpers"] for f in h["files"]]:
        try:
            with open(os.path.join(source_dir, f["source"]), "rb") as fh:
                if placeholder.encode("utf-8") in fh.read():
                    return True
        except OSError:
            pass
    return False


def server_command(session, side: Side, values: Dict[str, str]) -> List[str]:
    server = side.scenario["server"]
    if server.get("target"):
        exe = side.executables.get(server["target"])
        if not exe:
            where = session.scenario.where("build", "artifacts")
            raise BadScenario(f"{where}: build.artifacts: server.target {server['target']} is "
                              f"not among the artifacts every side builds and publishes")
    else:
        exe = server["command"]
        if not os.path.isabs(exe):
            found = shutil.which(exe) or shutil.which(exe, path="/usr/sbin:/sbin")
            if not found:
                raise IterationFailed(f"server command {exe!r} is not on PATH")
            exe = found
    return _taskset(server.get("cpus")) + [exe] + _render_args(session, side, ("server", "args"),
                                                                server["args"], values)


def run_iteration(session, side: Side, index: int, profile: bool = False, attempt: int = 0,
                  context: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Runs iteration `index` of `side`; returns its record (status "ok" or "failed"), also
    written to the iteration's iteration.json. `attempt` numbers the runs of an iteration that
    failed before (scenario key `retries`); `context` holds fields the record starts with (the
    run's id and order, earlier failed attempts)."""
    scenario = side.scenario
    server_cfg = scenario["server"]
    load_cfg = scenario["load"]
    name = f"{index:02d}-{side.label}" + ("-profile" if profile else "")
    if attempt:
        name += f"-retry{attempt}"
    it_dir = os.path.join(session.run_dir, "iterations", name)
    os.makedirs(it_dir, exist_ok=True)
    record: Dict[str, Any] = {"index": index, "side": side.label, "status": "ok",
                              "profiled": profile, "dir": os.path.relpath(it_dir,
                                                                          session.run_dir),
                              "started_unix": time.time()}
    record.update(context or {})
    server: Optional[Server] = None
    sampler: Optional[procstat.ProcessTreeSampler] = None
    load: Optional[Dict[str, Any]] = None
    helpers: List[Helper] = []
    bad: Optional[BadScenario] = None
    try:
        port_known = _uses(scenario, "{port}", side.source_dir)
        port = free_port() if port_known else None
        values = {"host": HOST, "run_dir": it_dir, "side_dir": side.side_dir}
        if port is not None:
            values["port"] = str(port)
        if _uses(scenario, "{tls_", side.source_dir):
            values.update(make_tls_files(session.run_dir))
        values["source_dir"] = side.source_dir
        for h in scenario["helpers"]:
            values[f"port:{h['name']}"] = str(free_port())
        _publish_files(session, side, ("server", "files"), server_cfg["files"], it_dir, values)
        for i, h in enumerate(scenario["helpers"]):
            _publish_files(session, side, ("helpers", i, "files"), h["files"], it_dir, values)
            args = _render_args(session, side, ("helpers", i, "args"), h["args"], values)
            helpers.append(Helper(h, it_dir, values, args))
        for h in helpers:
            h.wait_ready()
        cmd = server_command(session, side, values)
        record["server_command"] = cmd
        env = dict(os.environ, **server_cfg["env"])

        session.progress.status(f"[{side.label} {index}] {side.name}: starting the server")
        server = Server(cmd, it_dir, env, server_cfg["ready"], port,
                        parse_duration(server_cfg["stop_timeout"]))
        sampler = procstat.ProcessTreeSampler(session.tool("proc_sampler"), server.proc.pid,
                                              os.path.join(it_dir, "samples.txt"))
        sampler.start()
        server.wait_ready(parse_duration(server_cfg["ready_timeout"]))
        record["ready_line"] = server.ready_line
        record["ready_line_ms"] = server.ms_since_start(server.ready_line_at)
        record["port_ms"] = server.ms_since_start(server.port_at)
        record["startup_ms"] = (record["ready_line_ms"] if server_cfg["ready"] == "line"
                                else record["port_ms"])
        record["port"] = server.port

        fr = scenario["first_request"]
        protocol = fr["protocol"] or ("h2" if "--h2" in load_cfg["args"] else "http/1.1")
        tls = load_cfg["scheme"] == "https"
        try:
            first_ms, latency_ms, status = probe.first_request(
                HOST, server.port, fr["path"] or load_cfg["path"], protocol, tls, fr["requests"])
        except probe.ProbeError as e:
            raise IterationFailed(f"first request: {e}" + server.stderr_tail()) from None
        record.update(first_request_ms=first_ms, latency_ms=latency_ms,
                      first_request_status=status, first_request_protocol=protocol)

        load = _run_load(session, side, server, it_dir, port=server.port, profile=profile,
                         record=record)
        # The sampler must have sampled past the end of the window before it stops.
        window_end = load["start_unix_ns"] / 1e9 + load["duration_s"]
        time.sleep(max(0.0, window_end + 0.15 - time.time()))
        if scenario["server_counters"]["counters"]:
            record["server_counters"], problem = _read_server_counters(
                scenario, server.port, load_cfg["scheme"] == "https", load)
            if problem:
                raise IterationFailed(problem)
    except IterationFailed as e:
        record["status"] = "failed"
        record["error"] = str(e)
        if isinstance(e, BadScenario):
            bad = e
    finally:
        # A Ctrl-C (the first or another one) takes effect once everything is stopped.
        with children.sigint_deferred():
            if server is not None:
                if server.alive():
                    record["exit_status"] = server.stop(
                        parse_duration(server_cfg["stop_timeout"]))
                else:
                    record["exit_status"] = server.stop(0)
                    if record["status"] == "ok":
                        record["status"] = "failed"
                        record["error"] = (f"the server exited with status "
                                           f"{server.proc.returncode} during the run"
                                           + server.stderr_tail())
                record["server_stderr_tail"] = tail(server.stderr_path, 20)
            if sampler is not None:
                sampler.stop()
                record["sampler_cpu_pct"] = sampler.own_cpu_pct
            for h in helpers:
                h.stop()
            record["finished_unix"] = time.time()
    if load is not None and record["status"] == "ok":
        record.update(_metrics(load, sampler))
    if sampler is not None and sampler.samples:
        start = record.get("window_start_unix") or sampler.samples[0].t
        record["samples"] = [[round(s.t - start, 3), round(s.user_s, 3), round(s.system_s, 3),
                              s.rss_bytes] for s in sampler.samples]
    with open(os.path.join(it_dir, "iteration.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    if bad is not None:  # everything is stopped and recorded: now the run ends
        raise bad
    return record


def _series_sum(exposition: str, series: str) -> Optional[float]:
    """The sum of `series`'s samples in Prometheus text (`name value` or `name{...} value`), or
    None when the exposition has none."""
    total, seen = 0.0, False
    for line in exposition.splitlines():
        if not line.startswith(series):  # comments start with '#', never with a name
            continue
        rest = line[len(series):]
        if rest.startswith("{"):
            close = rest.rfind("}")
            if close < 0:
                continue
            rest = rest[close + 1:]
        elif not rest.startswith(" "):
            continue  # a longer name with this one as its prefix
        fields = rest.split()
        if not fields:
            continue
        try:
            total += float(fields[0])
        except ValueError:
            continue
        seen = True
    return total if seen else None


def _read_server_counters(scenario, port: int, tls: bool, load: Dict[str, Any]
                          ) -> Tuple[Dict[str, Optional[float]], Optional[str]]:
    """The scenario's server_counters after the load run (None for a series the page lacks; a
    server without the page, a peer or a variant without metrics, has none), and what is wrong
    when one is above its max_per_request."""
    cfg = scenario["server_counters"]
    try:
        status, body = probe.fetch(HOST, port, cfg["path"], tls)
    except probe.ProbeError as e:
        raise IterationFailed(f"server_counters: {e}") from None
    if status != 200:
        return {c["name"]: None for c in cfg["counters"]}, None
    text = body.decode("utf-8", errors="replace")
    values = {c["name"]: _series_sum(text, c["series"]) for c in cfg["counters"]}
    requests = load["requests"]["completed"]
    for c in cfg["counters"]:
        value, limit = values[c["name"]], c.get("max_per_request")
        if value is None or limit is None:
            continue
        # Cumulative since the server started (warmup included), over the measured requests:
        # the ratio errs on the side of failing.
        if requests:
            per_request = value / requests
        else:
            per_request = float("inf") if value > 0 else 0.0
        if per_request > limit:
            return values, (f"server counter {c['name']} ({c['series']}) is {value:,.0f} after "
                            f"{requests:,} measured requests: {per_request:.4g} per request, above "
                            f"max_per_request {limit:g}")
    return values, None


def _run_load(session, side: Side, server: Server, it_dir: str, port: int, profile: bool,
              record: Dict[str, Any]) -> Dict[str, Any]:
    scenario = side.scenario
    load_cfg = scenario["load"]
    url = f"{load_cfg['scheme']}://{HOST}:{port}{load_cfg['path']}"
    args = list(load_cfg["args"])
    if load_cfg["scheme"] == "https" and not {"-k", "--insecure"} & set(args):
        args.append("-k")
    json_path = os.path.join(it_dir, "load.json")
    warmup = parse_duration(scenario["warmup"])
    duration = parse_duration(scenario["duration"])
    cmd = _taskset(load_cfg.get("cpus")) + [
        session.loadgen, "--agents", ",".join(session.agents.addresses), "-d",
        format_duration(duration), "--warmup", format_duration(warmup), f"--json={json_path}",
        *args, url]
    record["load_command"] = cmd
    env = dict(os.environ, LOADGEN_TOKEN=session.agents.token)
    pids = procstat.process_tree(server.proc.pid)
    counter = profiler = None
    if scenario["syscalls"] and not profile:
        counter = perf.SyscallCounter(pids, os.path.join(it_dir, "syscalls.csv"),
                                      os.path.join(it_dir, "perf-stat.log"))
    if profile:
        profiler = perf.Profiler(pids, os.path.join(it_dir, "perf.data"),
                                 os.path.join(it_dir, "perf-record.log"))
    out_path, err_path = os.path.join(it_dir, "load.stdout"), os.path.join(it_dir, "load.stderr")
    started = time.monotonic()
    budget = warmup + duration + 60
    try:
        with open(out_path, "w") as out, open(err_path, "w") as err:
            # In the driver's process group, so a terminal's Ctrl-C reaches it too: loadgen takes
            # the first signal of each kind as "stop" (the controller then stops its agents' run)
            # and a second one of the same kind as "die". The driver's stop is SIGTERM, so that it
            # never turns the terminal's SIGINT into a kill before StopRun went out.
            proc = children.start(cmd, group=False, stop_signal=signal.SIGTERM, stdout=out,
                                  stderr=err, env=env, stdin=subprocess.DEVNULL)
            try:
                died = False
                while proc.poll() is None:
                    elapsed = time.monotonic() - started
                    session.progress.status(f"[{side.label} {record['index']}] {side.name}: "
                                            f"load {min(elapsed, warmup + duration + 1):.0f}/"
                                            f"{warmup + duration + 1:.0f} s")
                    if not server.alive() and not died:
                        died = True
                        proc.send_signal(signal.SIGINT)
                    if elapsed > budget:
                        children.stop(proc, 0)
                        raise IterationFailed(f"the load run did not end within "
                                              f"{budget:.0f} s")
                    time.sleep(0.1)
            finally:  # it has ended, unless the load was cut short (Ctrl-C)
                children.stop(proc, 10)
    finally:
        for attached in (counter, profiler):
            if attached:
                attached.stop()
    if not server.alive():
        raise IterationFailed(f"the server exited with status {children.exit_status(server.proc)} "
                              "during the load run" + server.stderr_tail())
    if proc.returncode == 2:
        refused = _loadgen_refusal(err_path)
        if refused is not None:
            raise _load_args_refused(session, side, refused)
    if proc.returncode != 0:
        raise IterationFailed(f"the load run failed (loadgen exit {proc.returncode}): "
                              + (tail(err_path, 8) or tail(out_path, 8)))
    try:
        with open(json_path, encoding="utf-8") as f:
            load = json.load(f)
    except (OSError, ValueError) as e:
        raise IterationFailed(f"the load run wrote no readable result: {e}") from None
    if counter:
        start = load["start_unix_ns"] / 1e9
        end = start + load["duration_s"]
        calls = counter.count_between(start, end)
        span = counter.window_seconds(start, end)
        if calls is not None and span > 0 and load["rps"] > 0:
            record["syscalls_per_request"] = calls / (load["rps"] * span)
    if profiler:
        record["folded_stacks"] = profiler.folded()
    return load


def _loadgen_refusal(err_path: str) -> Optional[str]:
    """loadgen exits 2 only for bad arguments, before any load; its first stderr line says which.
    None when it is about the driver's own --json file (a disk problem, not the scenario's)."""
    try:
        with open(err_path, encoding="utf-8", errors="replace") as f:
            first = next((line.strip() for line in f if line.strip()), "")
    except OSError:
        first = ""
    if first.startswith("loadgen: --json"):
        return None
    return first or "(nothing on its stderr)"


def _load_args_refused(session, side: Side, message: str) -> BadScenario:
    """The BadScenario of loadgen refusing the side's load arguments: load.args, and the
    variant's load_args appended to them."""
    variant = (side.scenario.get("variant") or {}).get("name")
    own = session.scenario.data["variants"][variant]["load_args"] if variant else []
    if not own and not session.scenario.data["load"]["args"]:
        # Only the flags the driver makes from the scenario's load section (path, agents...).
        return BadScenario(f"{session.scenario.where('load')}: load: loadgen refused the "
                           f"arguments made from it: {message}")
    if own and not session.scenario.data["load"]["args"]:
        key, text = ("variants", variant, "load_args"), f"variants.{variant}.load_args"
    else:
        key, text = ("load", "args"), "load.args"
        if own:
            text += f" (with variants.{variant}.load_args)"
    return BadScenario(f"{session.scenario.where(*key)}: {text}: loadgen refused its arguments: "
                       f"{message}")


def _metrics(load: Dict[str, Any], sampler: procstat.ProcessTreeSampler) -> Dict[str, Any]:
    start = load["start_unix_ns"] / 1e9
    end = start + load["duration_s"]
    window = sampler.window(start, end)
    completed = load["requests"]["completed"]
    codes = load.get("status_codes", {})
    bad_status = sum(n for code, n in codes.items() if not 200 <= int(code) < 400)
    e = load["errors"]
    socket_errors = e["connect"] + e["read"] + e["write"] + e["timeout"]
    lat = load["latency"]
    per_req = (lambda s: s * 1e6 / completed) if completed else (lambda s: None)
    return {
        "window_start_unix": start,
        "window_seconds": load["duration_s"],
        "rps": load["rps"],
        "requests": completed,
        "socket_errors": socket_errors,
        "bad_responses": e["bad_response"] + bad_status,
        "errors": socket_errors + e["bad_response"] + bad_status,
        "avg_latency_ms": lat["mean_ns"] / 1e6,
        "latency_percentiles_ms": {p: v / 1e6 for p, v in lat["percentiles_ns"].items()},
        "p99_ms": lat["percentiles_ns"].get("99", 0) / 1e6,
        "latency_spectrum": lat.get("spectrum", []),
        "latency_histogram": lat.get("histogram", ""),
        "cpu_pct": window.cpu_pct,
        "user_us_per_request": per_req(window.user_s),
        "kernel_us_per_request": per_req(window.system_s),
        "cpu_us_per_request": per_req(window.user_s + window.system_s),
        "memory_mb": window.peak_rss_bytes / (1 << 20),
        "mean_memory_mb": window.mean_rss_bytes / (1 << 20),
        "load_result": {k: load[k] for k in ("spec", "requests", "status_codes", "errors",
                                             "bytes", "connections", "first_error")
                        if k in load},
    }
