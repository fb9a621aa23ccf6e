"""Scenario files: what one benchmark pins, loaded from YAML and validated.

A scenario names the server (a Bazel target the driver builds, or an external command such as
nginx), the load (sluice's loadgen flags), the timing (warmup, duration, iterations), the CPU
sets, the build flags, the artifacts each build publishes into its run directory, and named
variants (flag sets or whole servers compared against each other). tools/README.md documents
every key; `SCHEMA` below is the one definition the validator and the documentation follow.

Every error names the file and line: `benchmarks/scenarios/x.yaml:12: load.args: ...`. Unknown
keys are errors (a typo must not silently fall back to a default).

    scenario = load_scenario("benchmarks/scenarios/h2_strategies.yaml")   # or ScenarioError
    side = scenario.resolve_variant("single_lock")  # the server and load of one side
"""

import copy
import dataclasses
import os
import re
from typing import Any, Dict, List, Optional, Tuple

import yaml


class ScenarioError(Exception):
    """A scenario that cannot be used; str() is `file:line: what is wrong`."""


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s|m|h)$")
_DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_LABEL = re.compile(r"^//[A-Za-z0-9_./-]*:[A-Za-z0-9_.+-]+$")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
_CPUSET = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
# The placeholders of args and files (the pattern runner._render fills in).
PLACEHOLDER = re.compile(r"\{([a-z_]+(?::[A-Za-z0-9_.-]+)?)\}")
# Placeholders every iteration has; {file:NAME} and {port:HELPER} depend on the side.
_FIXED_PLACEHOLDERS = ("host", "port", "run_dir", "side_dir", "source_dir", "tls_cert",
                       "tls_key")
MAX_DURATION_S = 86400.0   # a day: any longer is a typo, not a benchmark
# A scenario is a page of YAML: these bounds only stop files that would never finish loading.
MAX_DEPTH = 64             # nested mappings and lists
MAX_VALUES = 100_000       # values once YAML aliases are expanded


def parse_duration(text: str) -> float:
    """"10s", "500ms", "1.5s", "2m", "1h", "100us" -> seconds, at most MAX_DURATION_S.
    ValueError otherwise."""
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f'not a duration: "{text}" (use e.g. 10s, 500ms, 2m)')
    seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if seconds > MAX_DURATION_S:
        raise ValueError(f'duration "{text}" is longer than a day (24h)')
    return seconds


def format_duration(seconds: float) -> str:
    """The loadgen's duration syntax for `seconds` (whole milliseconds)."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def parse_cpuset(text: str) -> List[int]:
    """"0", "0-3", "0,2-3" -> sorted CPU numbers. ValueError otherwise."""
    text = text.strip()
    if not _CPUSET.match(text):
        raise ValueError(f'not a CPU list: "{text}" (use e.g. 0, 0-1, 0,2)')
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        lo_i, hi_i = int(lo), int(hi or lo)
        if hi_i < lo_i:
            raise ValueError(f'CPU range "{part}" runs backwards')
        cpus.update(range(lo_i, hi_i + 1))
    return sorted(cpus)


# ---------------------------------------------------------------------------------------------
# The schema. Each key: (type, default, documentation). Types: "str", "int+", "int" (>= 0), "duration",
# "cpuset", "label", "args" (a list of strings; numbers are taken as their text), "labels",
# "bool", ("enum", [...]), ("map", SUBSCHEMA), ("list_of", SUBSCHEMA), ("variants", SUBSCHEMA),
# "str_map" (string -> string), "number" (>= 0). A default of REQUIRED means the key must be
# present.

REQUIRED = object()

_FILE_SCHEMA = {
    "source": ("str", REQUIRED, "file to publish, relative to the source tree being built"),
    "as": ("str", None, "its name in the run directory (default: the source's base name)"),
}

_SERVER_SCHEMA = {
    "target": ("label", None, "Bazel target of the server; built and published by the driver"),
    "command": ("str", None, "or an external program (absolute path, or a name on PATH)"),
    "args": ("args", [], "arguments; {port}, {host}, {run_dir}, {file:NAME}, {tls_cert}, "
                         "{tls_key} are filled in"),
    "files": (("list_of", _FILE_SCHEMA), [], "configuration files published with the server, "
                                             "their {placeholders} filled in"),
    "ready": (("enum", ["line", "port"]), None,
              "line: wait for a line starting 'ready ' on stdout; port: for the port to accept "
              "(default: line for a target, port for a command)"),
    "ready_timeout": ("duration", "30s", "how long startup may take"),
    "cpus": ("cpuset", None, "CPUs the server is pinned to (taskset); default: not pinned"),
    "env": ("str_map", {}, "extra environment variables"),
    "stop_timeout": ("duration", "10s", "after SIGTERM, how long before SIGKILL"),
}

_LOAD_SCHEMA = {
    "path": ("str", "/", "request target"),
    "scheme": (("enum", ["http", "https"]), "http", "https: TLS (loadgen -k: any certificate)"),
    "args": ("args", [], "loadgen flags (-c, -t, --h2, -m, --pipeline, -R, -H, ...); not -d, -n, "
                         "--warmup, --json, --agents or the URL, which the driver sets"),
    "cpus": ("cpuset", None, "CPUs the local agent and controller are pinned to"),
    "agents": ("args", [], "HOST:PORT of running loadgen agents (token in LOADGEN_TOKEN); "
                           "default: one local agent the driver starts"),
}

_BUILD_SCHEMA = {
    "flags": ("args", ["-c", "opt"], "Bazel flags for every build of every side"),
    "artifacts": ("labels", None, "targets each build publishes into its run directory "
                                  "(default: server.target)"),
    "publish": (("enum", ["copy", "hardlink", "symlink"]), "copy",
                "how artifacts reach the run directory: the same for every side"),
}

_FIRST_REQUEST_SCHEMA = {
    "path": ("str", None, "request target of the first request (default: load.path)"),
    "protocol": (("enum", ["http/1.1", "h2"]), None,
                 "default: h2 when load.args has --h2, else http/1.1"),
    "requests": ("int+", 10, "requests timed after the first, for 'Latency (ms)' (no load)"),
}

_HELPER_SCHEMA = {
    "name": ("str", REQUIRED, "its name; {port:NAME} is a free port picked for it"),
    "command": ("str", REQUIRED, "program (absolute path, or a name on PATH)"),
    "args": ("args", [], "arguments, with the server's placeholders and {source_dir}"),
    "files": (("list_of", _FILE_SCHEMA), [], "files published for it, placeholders filled in"),
    "cpus": ("cpuset", None, "CPUs it is pinned to (taskset)"),
    "ready_timeout": ("duration", "30s", "how long it may take to accept on {port:NAME}"),
}

_COUNTER_SCHEMA = {
    "name": ("str", REQUIRED, "its name in results and errors"),
    "series": ("str", REQUIRED, "the Prometheus series read (an exact name, e.g. "
                                "sluice_telemetry_span_queue_dropped_total; labelled series of "
                                "that name are summed)"),
    "max_per_request": ("number", None, "the iteration fails when the value after the load, "
                                        "divided by the measured requests, is above this"),
}

_SERVER_COUNTERS_SCHEMA = {
    "path": ("str", "/metrics", "where the server exposes them (Prometheus text), over the "
                                "load's scheme"),
    "counters": (("list_of", _COUNTER_SCHEMA), [], "the counters read after each load run"),
}

_VARIANT_SCHEMA = {
    "description": ("str", "", "what this variant is"),
    "server_args": ("args", [], "appended to server.args"),
    "load_args": ("args", [], "appended to load.args"),
    "server": ("partial_server", None, "replaces these keys of `server` (e.g. a peer's command)"),
    "helpers": (("list_of", _HELPER_SCHEMA), [], "more helpers for this variant"),
}

SCHEMA = {
    "name": ("str", None, "short name (default: the file's base name)"),
    "description": ("str", "", "one line for reports"),
    "server": (("map", _SERVER_SCHEMA), REQUIRED, "the server under test"),
    "load": (("map", _LOAD_SCHEMA), {}, "the load, through loadgen agents"),
    "warmup": ("duration", "2s", "load before measuring (not counted)"),
    "duration": ("duration", "10s", "measured load per iteration"),
    "iterations": ("int+", 6, "iterations per side (interleaved by round: A B, B A, ...); "
                   "compared round by round when 6 or more rounds have both sides"),
    "retries": ("int", 0, "a failed iteration runs again, up to this many times, in its place "
                "in the round; the failed attempts stay in the result and the report (not part "
                "of the pinned configuration)"),
    "build": (("map", _BUILD_SCHEMA), {}, "how every side is built and published"),
    "first_request": (("map", _FIRST_REQUEST_SCHEMA), {}, "the request timed right after ready"),
    "syscalls": ("bool", False, "count the server's system calls in the measured window (perf)"),
    "helpers": (("list_of", _HELPER_SCHEMA), [],
                "processes started before the server each iteration and stopped after it "
                "(a collector, a scraper)"),
    "server_counters": (("map", _SERVER_COUNTERS_SCHEMA), {},
                        "the server's own counters, read after each load run (spans dropped, "
                        "errors); a side whose server does not expose them records none"),
    "variants": (("variants", _VARIANT_SCHEMA), {}, "named flag sets or servers"),
}


@dataclasses.dataclass
class Scenario:
    """A validated scenario. `data` holds every key with its default filled in."""

    path: str
    data: Dict[str, Any]
    lines: Dict[Tuple, int]

    @property
    def name(self) -> str:
        return self.data["name"]

    def line_of(self, *key) -> int:
        """The line of `key` (a path into the document), or of its nearest parent."""
        key = tuple(key)
        while key and key not in self.lines:
            key = key[:-1]
        return self.lines.get(key, 1)

    def where(self, *key) -> str:
        return f"{self.path}:{self.line_of(*key)}"

    def variant_names(self) -> List[str]:
        return list(self.data["variants"])

    def resolve_variant(self, name: Optional[str]) -> Dict[str, Any]:
        """The scenario as one side runs it: `server` and `load` with the variant applied.

        ScenarioError for an unknown variant name (listing the known ones).
        """
        data = copy.deepcopy(self.data)
        if name is None:
            data["variant"] = None
            return data
        variants = data["variants"]
        if name not in variants:
            known = ", ".join(variants) or "none"
            raise ScenarioError(f"{self.where('variants')}: no variant named {name!r} "
                                f"(known: {known})")
        v = variants[name]
        server = data["server"]
        if v.get("server"):
            for key, value in v["server"].items():
                server[key] = value
            if "command" in v["server"]:
                server["target"] = None
            if "target" in v["server"]:
                server["command"] = None
            _fill_server_defaults(server)
        server["args"] = list(server["args"]) + list(v["server_args"])
        data["load"]["args"] = list(data["load"]["args"]) + list(v["load_args"])
        data["helpers"] = list(data["helpers"]) + list(v["helpers"])
        data["variant"] = {"name": name, "description": v["description"]}
        return data


def _fill_server_defaults(server: Dict[str, Any]) -> None:
    if server.get("ready") is None:
        server["ready"] = "line" if server.get("target") else "port"


# ---------------------------------------------------------------------------------------------
# Loading: YAML nodes keep their line numbers; values are checked against SCHEMA.

def key_text(key: Tuple) -> str:
    """("load", "args", 1) -> "load.args[1]"."""
    out = ""
    for k in key:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out or "scenario"


class _Loader:
    def __init__(self, path: str):
        self.path = path
        self.lines: Dict[Tuple, int] = {}
        self.values = 0
        self.open_nodes: set = set()  # ids of the mappings and lists being expanded

    def fail(self, key: Tuple, line: int, message: str):
        raise ScenarioError(f"{self.path}:{line}: {key_text(key)}: {message}")

    def plain(self, node, key: Tuple):
        """A YAML node as plain Python values, recording the line of every key.

        Aliases are expanded (a shared `&anchor` is copied where `*anchor` names it), up to
        MAX_VALUES values in all; an alias inside its own anchor is an error."""
        line = node.start_mark.line + 1
        self.lines[key] = line
        self.values += 1
        if self.values > MAX_VALUES:
            self.fail(key, line, f"the scenario expands to more than {MAX_VALUES:,} values "
                                 "(YAML aliases repeated inside aliases?)")
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            if id(node) in self.open_nodes:
                self.fail(key, line, "a YAML alias refers to a mapping or list that contains "
                                     "it (the value would be infinite)")
            if len(key) >= MAX_DEPTH:
                self.fail(key, line, f"nested more than {MAX_DEPTH} levels deep")
            self.open_nodes.add(id(node))
            try:
                return self._plain_collection(node, key)
            finally:
                self.open_nodes.discard(id(node))
        # A scalar: the safe constructor types it (int, bool, str, null).
        return _SCALAR_LOADER.construct_object(node, deep=True)

    def _plain_collection(self, node, key: Tuple):
        if isinstance(node, yaml.MappingNode):
            out = {}
            for k_node, v_node in node.value:
                if not isinstance(k_node, yaml.ScalarNode):
                    self.fail(key, k_node.start_mark.line + 1, "keys must be plain names")
                k = k_node.value
                if k in out:
                    self.fail(key + (k,), k_node.start_mark.line + 1, "given twice")
                out[k] = self.plain(v_node, key + (k,))
                self.lines[key + (k,)] = k_node.start_mark.line + 1
            return out
        return [self.plain(item, key + (i,)) for i, item in enumerate(node.value)]


    def check(self, value, kind, key: Tuple):
        line = self.lines.get(key, 1)
        if isinstance(kind, tuple):
            what, sub = kind
            if what == "enum":
                if value not in sub:
                    self.fail(key, line, f"must be one of {', '.join(sub)}, not {value!r}")
                return value
            if what == "map":
                return self.check_map(value, sub, key)
            if what == "list_of":
                if not isinstance(value, list):
                    self.fail(key, line, "must be a list")
                return [self.check_map(item, sub, key + (i,)) for i, item in enumerate(value)]
            if what == "variants":
                if not isinstance(value, dict):
                    self.fail(key, line, "must be a mapping of variant names to settings")
                out = {}
                for name, settings in value.items():
                    if not _NAME.match(str(name)):
                        self.fail(key + (name,), self.lines.get(key + (name,), line),
                                  "a variant name is a letter followed by letters, digits, "
                                  "'_', '-' or '.'")
                    out[name] = self.check_map(settings or {}, sub, key + (name,))
                return out
            raise AssertionError(kind)
        if kind == "str":
            if not isinstance(value, str):
                self.fail(key, line, f"must be a string, not {_type_name(value)}")
            return value
        if kind == "bool":
            if not isinstance(value, bool):
                self.fail(key, line, f"must be true or false, not {value!r}")
            return value
        if kind in ("int+", "int"):
            least = 1 if kind == "int+" else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                self.fail(key, line, f"must be a whole number >= {least}, not {value!r}")
            return value
        if kind == "number":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                self.fail(key, line, f"must be a number >= 0, not {value!r}")
            return float(value)
        if kind == "duration":
            if not isinstance(value, str):
                self.fail(key, line, f"must be a duration such as 10s or 500ms, not {value!r}")
            try:
                parse_duration(value)
            except ValueError as e:
                self.fail(key, line, str(e))
            return value
        if kind == "cpuset":
            text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
            if not isinstance(text, str):
                self.fail(key, line, f"must be a CPU list such as 0 or 0-1, not {value!r}")
            try:
                cpus = parse_cpuset(text)
            except ValueError as e:
                self.fail(key, line, str(e))
            online = os.cpu_count() or 1
            if cpus[-1] >= online:
                self.fail(key, line, f"CPU {cpus[-1]} does not exist (this machine has "
                                     f"{online}: 0-{online - 1})")
            return text
        if kind == "label":
            if not isinstance(value, str) or not _LABEL.match(value):
                self.fail(key, line, f"must be a Bazel label such as //servers:plaintext, "
                                     f"not {value!r}")
            return value
        if kind in ("args", "labels"):
            if not isinstance(value, list):
                self.fail(key, line, "must be a list")
            out = []
            for i, item in enumerate(value):
                item_line = self.lines.get(key + (i,), line)
                if isinstance(item, (dict, list)):
                    self.fail(key + (i,), item_line,
                              "must be a string; quote values that start with '{' or '[', "
                              "e.g. '{port}'")
                if item is None or isinstance(item, bool):
                    self.fail(key + (i,), item_line, f"must be a string, not {item!r}")
                text = str(item)
                if kind == "labels" and not _LABEL.match(text):
                    self.fail(key + (i,), item_line,
                              f"must be a Bazel label such as //servers:plaintext, not {text!r}")
                out.append(text)
            return out
        if kind == "str_map":
            if not isinstance(value, dict):
                self.fail(key, line, "must be a mapping of names to strings")
            return {str(k): str(v) for k, v in value.items()}
        if kind == "partial_server":
            if not isinstance(value, dict):
                self.fail(key, line, "must be a mapping with keys of `server`")
            return self.check_map(value, _SERVER_SCHEMA, key, fill_defaults=False)
        raise AssertionError(kind)

    def check_map(self, value, schema, key: Tuple, fill_defaults=True):
        line = self.lines.get(key, 1)
        if value is None:
            value = {}
        if not isinstance(value, dict):
            self.fail(key, line, f"must be a mapping, not {_type_name(value)}")
        for k in value:
            if k not in schema:
                near = _closest(k, schema)
                hint = f" (did you mean {near!r}?)" if near else ""
                self.fail(key + (k,), self.lines.get(key + (k,), line),
                          f"unknown key{hint}; known: {', '.join(schema)}")
        out = {}
        for k, (kind, default, _doc) in schema.items():
            if k in value and value[k] is not None:
                out[k] = self.check(value[k], kind, key + (k,))
            elif default is REQUIRED:
                self.fail(key + (k,), line, "is required")
            elif fill_defaults:
                if isinstance(default, str) and kind != "str" and not isinstance(kind, tuple):
                    out[k] = self.check(default, kind, key + (k,))
                elif isinstance(kind, tuple) and kind[0] == "map":
                    out[k] = self.check_map(copy.deepcopy(default) or {}, kind[1], key + (k,))
                else:
                    out[k] = copy.deepcopy(default)
        return out


_SCALAR_LOADER = yaml.SafeLoader("")


def _type_name(value) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", int: "a number",
            float: "a number", bool: "true/false", type(None): "nothing"}.get(type(value),
                                                                             type(value).__name__)


def _closest(word: str, choices) -> Optional[str]:
    import difflib
    found = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def load_scenario(path: str, display_path: Optional[str] = None,
                  source_root: Optional[str] = None) -> Scenario:
    """Reads and validates the scenario at `path`. ScenarioError (file:line: ...) otherwise.

    source_root: the source tree `files[].source` must exist in (checked when given)."""
    shown = display_path or path
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ScenarioError(f"{shown}: cannot read: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ScenarioError(f"{shown}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at "
                            f"offset {e.start})") from None
    return parse_scenario(text, shown, source_root)


def _check_nesting(text: str, path: str) -> None:
    """Refuses YAML nested deeper than MAX_DEPTH before it is composed (PyYAML's composer
    recurses once per level)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise ScenarioError(f"{path}:{event.start_mark.line + 1}: nested more than "
                                    f"{MAX_DEPTH} levels deep")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def parse_scenario(text: str, path: str, source_root: Optional[str] = None) -> Scenario:
    """Validates scenario `text` (named `path` in errors); see load_scenario for source_root."""
    loader = _Loader(path)
    try:
        _check_nesting(text, path)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        problem = getattr(e, "problem", None) or str(e)
        raise ScenarioError(f"{path}:{line}: not valid YAML: {problem}") from None
    except RecursionError:
        raise ScenarioError(f"{path}:1: nested too deeply to read") from None
    if root is None:
        raise ScenarioError(f"{path}:1: the file is empty; a scenario needs at least `server`")
    if not isinstance(root, yaml.MappingNode):
        raise ScenarioError(f"{path}:{root.start_mark.line + 1}: a scenario is a mapping "
                            "(key: value lines)")
    try:
        plain = loader.plain(root, ())
    except RecursionError:
        raise ScenarioError(f"{path}:1: nested too deeply to read") from None
    data = loader.check_map(plain, SCHEMA, ())
    scenario = Scenario(path=path, data=data, lines=loader.lines)
    if data.get("name") is not None:
        if not _NAME.match(data["name"]):
            raise ScenarioError(f"{scenario.where('name')}: name: a letter followed by letters, "
                                f"digits, '_', '-' or '.', not {data['name']!r} (it names the "
                                "output directory)")
    else:
        data["name"] = os.path.splitext(os.path.basename(path))[0]
    _check_server(scenario, data["server"], ("server",), complete=True)
    for name, v in data["variants"].items():
        if v.get("server"):
            merged = dict(data["server"])
            merged.update(v["server"])
            if "command" in v["server"]:
                merged["target"] = None
            if "target" in v["server"]:
                merged["command"] = None
            _check_server(scenario, merged, ("variants", name, "server"), complete=True)
    _check_load(scenario)
    _check_timing(scenario)
    _check_files(scenario, source_root)
    _check_placeholders(scenario)
    _fill_server_defaults(data["server"])
    if data["build"]["artifacts"] is None:
        target = data["server"].get("target")
        data["build"]["artifacts"] = [target] if target else []
    return scenario


def _check_server(scenario: Scenario, server: Dict[str, Any], key: Tuple, complete: bool):
    has_target = bool(server.get("target"))
    has_command = bool(server.get("command"))
    if complete and has_target == has_command:
        raise ScenarioError(f"{scenario.where(*key)}: {key_text(key)}: needs exactly one of "
                            "`target` (a Bazel label) or `command` (an external program)")
    needs_port = server.get("ready") == "port" or (has_command and server.get("ready") is None)
    port_given = any("{port}" in a for a in server.get("args", [])) or bool(server.get("files"))
    if needs_port and not port_given:
        raise ScenarioError(f"{scenario.where(*key)}: {key_text(key)}: `ready: port` needs "
                            "the port in the server's args or files: use {port}")


_DRIVER_FLAGS = {"-d", "--duration", "-n", "--requests", "--warmup", "--json", "--agents",
                 "--token"}


def _check_load(scenario: Scenario):
    args = scenario.data["load"]["args"]
    for i, a in enumerate(args):
        flag = a.split("=", 1)[0]
        if flag in _DRIVER_FLAGS:
            raise ScenarioError(f"{scenario.where('load', 'args', i)}: load.args: {flag} is set "
                                "by the driver (use warmup, duration and load.agents)")
        if a.startswith("http://") or a.startswith("https://"):
            raise ScenarioError(f"{scenario.where('load', 'args', i)}: load.args: the URL is "
                                "made by the driver from load.scheme and load.path")
    path = scenario.data["load"]["path"]
    if not path.startswith("/"):
        raise ScenarioError(f"{scenario.where('load', 'path')}: load.path: must start with '/'")
    for i, agent in enumerate(scenario.data["load"]["agents"]):
        if not re.match(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):\d+$", agent):
            raise ScenarioError(f"{scenario.where('load', 'agents', i)}: load.agents: "
                                f"{agent!r} is not HOST:PORT")
        port = int(agent.rsplit(":", 1)[1])
        if not 1 <= port <= 65535:
            raise ScenarioError(f"{scenario.where('load', 'agents', i)}: load.agents: "
                                f"{agent!r}: the port must be 1 to 65535")
    first = scenario.data["first_request"]["path"]
    if first is not None and not first.startswith("/"):
        raise ScenarioError(f"{scenario.where('first_request', 'path')}: first_request.path: "
                            "must start with '/'")


def _check_timing(scenario: Scenario):
    if parse_duration(scenario.data["duration"]) <= 0:
        raise ScenarioError(f"{scenario.where('duration')}: duration: the measured load must "
                            f"last longer than {scenario.data['duration']}")


def _file_lists(data: Dict[str, Any]):
    """(key, files) of every `files` list: the server's, the helpers', and the variants'."""
    yield ("server", "files"), data["server"]["files"]
    for i, h in enumerate(data["helpers"]):
        yield ("helpers", i, "files"), h["files"]
    for name, v in data["variants"].items():
        if (v.get("server") or {}).get("files") is not None:
            yield ("variants", name, "server", "files"), v["server"]["files"]
        for i, h in enumerate(v["helpers"]):
            yield ("variants", name, "helpers", i, "files"), h["files"]


def _check_files(scenario: Scenario, source_root: Optional[str]):
    """files[].source is a relative path inside the source tree (and exists there when
    source_root is given); files[].as is a plain file name in the iteration's directory."""
    for key, files in _file_lists(scenario.data):
        for i, f in enumerate(files):
            source = f["source"]
            where = scenario.where(*key, i, "source")
            what = f"{key_text(key + (i, 'source'))}"
            parts = source.replace("\\", "/").split("/")
            if not source or os.path.isabs(source) or ".." in parts:
                raise ScenarioError(f"{where}: {what}: {source!r}: must be a path relative to "
                                    "the source tree, without '..'")
            if source_root is not None:
                full = os.path.join(source_root, source)
                if not os.path.isfile(full):
                    raise ScenarioError(f"{where}: {what}: {source!r} is not a file of "
                                        f"{source_root}")
            dest = f.get("as")
            if dest is not None and (dest in ("", ".", "..") or "/" in dest or "\\" in dest):
                raise ScenarioError(f"{scenario.where(*key, i, 'as')}: "
                                    f"{key_text(key + (i, 'as'))}: {dest!r}: must be a plain "
                                    "file name (no '/' or '..'): files go in the iteration's "
                                    "directory")
            if dest is None and os.path.basename(source) in ("", ".", ".."):
                raise ScenarioError(f"{where}: {what}: {source!r} names no file")


def _check_placeholders(scenario: Scenario):
    """Every {placeholder} of the servers' and helpers' args is one a side fills in."""
    data = scenario.data

    def check(args, key, known):
        for i, a in enumerate(args):
            for m in PLACEHOLDER.finditer(a):
                if m.group(1) not in known:
                    raise ScenarioError(
                        f"{scenario.where(*key, i)}: {key_text(key + (i,))}: unknown "
                        f"placeholder {m.group(0)} (known: {', '.join(sorted(known))})")

    def known_of(v):
        server = dict(data["server"])
        server.update(v.get("server") or {})
        helpers = list(data["helpers"]) + list(v.get("helpers") or [])
        known = set(_FIXED_PLACEHOLDERS)
        for f in list(server["files"]) + [f for h in helpers for f in h["files"]]:
            known.add("file:" + (f.get("as") or os.path.basename(f["source"])))
        known.update("port:" + h["name"] for h in helpers)
        return known

    # Each variant strictly; the base with what any side provides (a base whose args name a
    # helper only the variants start is run through its variants).
    everything = known_of({})
    for v in data["variants"].values():
        everything |= known_of(v)
    check(data["server"]["args"], ("server", "args"), everything)
    for i, h in enumerate(data["helpers"]):
        check(h["args"], ("helpers", i, "args"), everything)
    for name, v in data["variants"].items():
        known = known_of(v)
        base = ("variants", name)
        partial = v.get("server") or {}
        if "args" in partial:
            check(partial["args"], base + ("server", "args"), known)
        else:
            check(data["server"]["args"], ("server", "args"), known)
        check(v["server_args"], base + ("server_args",), known)
        for i, h in enumerate(data["helpers"]):
            check(h["args"], ("helpers", i, "args"), known)
        for i, h in enumerate(v["helpers"]):
            check(h["args"], base + ("helpers", i, "args"), known)


def schema_markdown() -> str:
    """The schema as Markdown tables (tools/README.md is checked against it by a test)."""
    out = []

    def table(title, schema):
        out.append(f"### `{title}`\n")
        out.append("| key | type | default | meaning |")
        out.append("| --- | --- | --- | --- |")
        for k, (kind, default, doc) in schema.items():
            out.append(f"| `{k}` | {_kind_name(kind)} | {_default_text(default)} | {doc} |")
        out.append("")

    table("top level", SCHEMA)
    table("server", _SERVER_SCHEMA)
    table("server.files[]", _FILE_SCHEMA)
    table("load", _LOAD_SCHEMA)
    table("build", _BUILD_SCHEMA)
    table("first_request", _FIRST_REQUEST_SCHEMA)
    table("helpers[]", _HELPER_SCHEMA)
    table("server_counters", _SERVER_COUNTERS_SCHEMA)
    table("server_counters.counters[]", _COUNTER_SCHEMA)
    table("variants.NAME", _VARIANT_SCHEMA)
    return "\n".join(out)


def _kind_name(kind) -> str:
    if isinstance(kind, tuple):
        if kind[0] == "enum":
            return " \\| ".join(kind[1])
        return {"map": "mapping", "list_of": "list of mappings", "variants": "mapping"}[kind[0]]
    return {"str": "string", "int+": "integer >= 1", "int": "integer >= 0", "duration": "duration", "cpuset": "CPU list",
            "label": "Bazel label", "args": "list of strings", "labels": "list of labels",
            "bool": "bool", "str_map": "mapping", "partial_server": "mapping",
            "number": "number >= 0"}[kind]


def _default_text(default) -> str:
    if default is REQUIRED:
        return "required"
    if default is None or default in ({}, [], ""):
        return "-"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, list):
        return "`" + " ".join(default) + "`"
    return f"`{default}`"
