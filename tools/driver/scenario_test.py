"""Scenario files: defaults, variants, and errors that name the file and the line."""

import os
import re
import unittest

from tools.driver import scenario as sc

GOOD = """\
name: demo
server:
  target: //servers:plaintext
  args: [--port=0, --threads=1]
  cpus: "0"
load:
  path: /plaintext
  args: [-c, 64, --h2, -m, "16"]
warmup: 1s
duration: 500ms
iterations: 3
variants:
  two_locks:
    server_args: [--h2-output=two_locks]
  nginx:
    description: the peer
    server:
      command: nginx
      args: [-c, "{file:nginx.conf}"]
      files: [{source: benchmarks/peers/nginx.conf}]
      ready: port
"""


class raises_scenario_error:
    """`with raises_scenario_error() as e:` ... then str(e.exception)."""

    def __enter__(self):
        return self

    def __exit__(self, kind, value, _tb):
        if kind is None:
            raise AssertionError("no ScenarioError")
        if not issubclass(kind, sc.ScenarioError):
            return False
        self.exception = value
        return True


def error_of(text: str) -> str:
    with raises_scenario_error() as e:
        sc.parse_scenario(text, "s.yaml")
    return str(e.exception)


class ScenarioTest(unittest.TestCase):
    def test_fills_defaults_and_takes_numbers_in_args_as_text(self):
        s = sc.parse_scenario(GOOD, "s.yaml")
        self.assertEqual(s.name, "demo")
        self.assertEqual(s.data["load"]["args"], ["-c", "64", "--h2", "-m", "16"])
        self.assertEqual(s.data["build"]["flags"], ["-c", "opt"])
        self.assertEqual(s.data["build"]["artifacts"], ["//servers:plaintext"])
        self.assertEqual(s.data["build"]["publish"], "copy")
        self.assertEqual(s.data["server"]["ready"], "line")
        self.assertEqual(s.data["load"]["scheme"], "http")
        self.assertEqual(s.data["first_request"]["requests"], 10)

    def test_name_defaults_to_the_file_name(self):
        s = sc.parse_scenario("server: {target: '//a:b'}\n", "dir/my_case.yaml")
        self.assertEqual(s.name, "my_case")

    def test_variant_appends_flags_and_keeps_the_base(self):
        s = sc.parse_scenario(GOOD, "s.yaml")
        side = s.resolve_variant("two_locks")
        self.assertEqual(side["server"]["args"], ["--port=0", "--threads=1",
                                                  "--h2-output=two_locks"])
        self.assertEqual(s.data["server"]["args"], ["--port=0", "--threads=1"])
        self.assertEqual(side["variant"]["name"], "two_locks")

    def test_variant_may_replace_the_server_with_a_command(self):
        side = sc.parse_scenario(GOOD, "s.yaml").resolve_variant("nginx")
        self.assertIsNone(side["server"]["target"])
        self.assertEqual(side["server"]["command"], "nginx")
        self.assertEqual(side["server"]["ready"], "port")
        self.assertEqual(side["server"]["cpus"], "0")  # kept from the base

    def test_unknown_variant_lists_the_known_ones(self):
        s = sc.parse_scenario(GOOD, "s.yaml")
        with raises_scenario_error() as e:
            s.resolve_variant("single")
        self.assertIn("no variant named 'single'", str(e.exception))
        self.assertIn("two_locks, nginx", str(e.exception))

    def test_unknown_key_names_file_line_and_a_near_miss(self):
        msg = error_of("server:\n  target: //a:b\n  argz: []\n")
        self.assertEqual(msg.split(": ")[0], "s.yaml:3")
        self.assertIn("server.argz: unknown key (did you mean 'args'?)", msg)

    def test_wrong_types_are_named_with_their_line(self):
        cases = {
            "server:\n  target: //a:b\nduration: 10\n": ("s.yaml:3", "duration: must be a duration"),
            "server:\n  target: //a:b\niterations: 0\n": ("s.yaml:3", "whole number >= 1"),
            "server:\n  target: //a:b\nwarmup: 5 seconds\n": ("s.yaml:3", "not a duration"),
            "server:\n  target: servers/plaintext\n": ("s.yaml:2", "must be a Bazel label"),
            "server:\n  target: //a:b\nload:\n  args: -c 64\n": ("s.yaml:4", "must be a list"),
            "server:\n  target: //a:b\nsyscalls: yes please\n": ("s.yaml:3", "true or false"),
            "server:\n  target: //a:b\nbuild:\n  publish: move\n": ("s.yaml:4",
                                                                "one of copy, hardlink, symlink"),
            "server:\n  target: //a:b\nserver_counters:\n  counters:\n    - name: x\n"
            "      series: y\n      max_per_request: -1\n": ("s.yaml:7", "number >= 0"),
            "server:\n  target: //a:b\nserver_counters:\n  counters:\n    - name: x\n": (
                "s.yaml:5", "series"),
        }
        for text, (where, what) in cases.items():
            with self.subTest(text=text):
                msg = error_of(text)
                self.assertTrue(msg.startswith(where + ": "), msg)
                self.assertIn(what, msg)

    def test_an_unquoted_placeholder_is_explained(self):
        msg = error_of("server:\n  target: //a:b\n  args:\n    - --port\n    - {port}\n")
        self.assertTrue(msg.startswith("s.yaml:5: server.args[1]: "), msg)
        self.assertIn("'{port}'", msg)

    def test_missing_or_double_server(self):
        self.assertIn("s.yaml:1: server: is required", error_of("duration: 1s\n"))
        self.assertIn("exactly one of", error_of("server:\n  args: []\n"))
        self.assertIn("exactly one of",
                      error_of("server:\n  target: //a:b\n  command: nginx\n  args: ['{port}']\n"))

    def test_a_port_wait_needs_the_port(self):
        msg = error_of("server:\n  command: nginx\n")
        self.assertIn("use {port}", msg)

    def test_driver_flags_in_the_load_are_refused(self):
        for flag in ("-d", "--duration=5s", "-n", "--warmup", "--json", "--agents"):
            with self.subTest(flag=flag):
                msg = error_of(f"server:\n  target: //a:b\nload:\n  args: [-c, '1', '{flag}']\n")
                self.assertIn("set by the driver", msg)
                self.assertTrue(msg.startswith("s.yaml:4: "), msg)
        self.assertIn("made by the driver", error_of(
            "server:\n  target: //a:b\nload:\n  args: ['http://127.0.0.1/']\n"))

    def test_cpus_must_exist_on_this_machine(self):
        msg = error_of(f"server:\n  target: //a:b\n  cpus: '{os.cpu_count()}'\n")
        self.assertIn("does not exist", msg)
        self.assertIn("s.yaml:3", msg)

    def test_agents_are_host_port(self):
        self.assertIn("is not HOST:PORT", error_of(
            "server:\n  target: //a:b\nload:\n  agents: [somewhere]\n"))

    def test_yaml_errors_and_empty_files(self):
        self.assertRegex(error_of("server: [\n"), r"^s\.yaml:\d+: not valid YAML")
        self.assertIn("the file is empty", error_of(""))
        self.assertIn("a scenario is a mapping", error_of("- a\n- b\n"))
        self.assertIn("given twice", error_of("server: {target: '//a:b'}\nserver: {}\n"))

    def test_a_file_that_cannot_be_read(self):
        with raises_scenario_error() as e:
            sc.load_scenario("/nonexistent/x.yaml")
        self.assertIn("/nonexistent/x.yaml: cannot read", str(e.exception))

    def test_durations_and_cpu_lists(self):
        self.assertEqual(sc.parse_duration("1.5s"), 1.5)
        self.assertEqual(sc.parse_duration("250ms"), 0.25)
        self.assertEqual(sc.parse_duration("2m"), 120)
        self.assertEqual(sc.format_duration(0.25), "250ms")
        self.assertEqual(sc.format_duration(10), "10s")
        self.assertEqual(sc.parse_cpuset("0,2-3"), [0, 2, 3])
        for bad in ("3-1", "a", "1,", ""):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                sc.parse_cpuset(bad)

    def test_shipped_scenarios_are_valid(self):
        scenarios = os.path.join("benchmarks", "scenarios")
        names = sorted(n for n in os.listdir(scenarios) if n.endswith(".yaml"))
        self.assertTrue(names)
        for n in names:
            with self.subTest(scenario=n):
                s = sc.load_scenario(os.path.join(scenarios, n))
                for v in s.variant_names():
                    s.resolve_variant(v)

    def test_aliases_are_expanded_within_a_bound_and_never_into_themselves(self):
        # A shared helper list is fine (the shipped telemetry scenarios do that).
        s = sc.parse_scenario("server: {target: '//a:b'}\nhelpers: &h []\nvariants:\n"
                              "  a: {helpers: *h}\n", "s.yaml")
        self.assertEqual(s.data["variants"]["a"]["helpers"], [])
        # Eight levels of ten aliases each would be 10^9 values: refused, and quickly.
        lines = ["server: {target: '//a:b'}", "l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
        lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 9)]
        msg = error_of("\n".join(lines) + "\n")
        self.assertIn(f"expands to more than {sc.MAX_VALUES:,} values", msg)
        msg = error_of("server: &s {target: '//a:b', <<: *s}\n")
        self.assertTrue(msg.startswith("s.yaml:1: server.<<: "), msg)
        self.assertIn("contains it", msg)

    def test_deep_nesting_is_refused_not_a_recursion_error(self):
        for deep in ("[" * 5000 + "]" * 5000, "{a: " * 5000 + "1" + "}" * 5000):
            with self.subTest(deep=deep[:3]):
                msg = error_of("server: {target: '//a:b'}\nx: " + deep + "\n")
                self.assertEqual(msg, f"s.yaml:2: nested more than {sc.MAX_DEPTH} levels deep")

    def test_a_file_that_is_not_utf8(self):
        path = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "latin.yaml")
        with open(path, "wb") as f:
            f.write(b"server:\n  target: //a:b\n# caf\xe9\n")
        with raises_scenario_error() as e:
            sc.load_scenario(path, "latin.yaml")
        self.assertEqual(str(e.exception), "latin.yaml:3: not UTF-8 text (byte 0xe9 at offset 29)")

    def test_files_stay_inside_the_source_tree_and_the_iteration_directory(self):
        base = "server:\n  command: nginx\n  args: ['{port}']\n  files:\n"
        cases = {
            "    - {source: /etc/passwd}\n": ("s.yaml:5: server.files[0].source: ", "relative"),
            "    - {source: ../../etc/shadow}\n": ("s.yaml:5: server.files[0].source: ", "'..'"),
            "    - {source: a/../../b}\n": ("s.yaml:5: server.files[0].source: ", "'..'"),
            "    - {source: a.conf, as: ../../x}\n": ("s.yaml:5: server.files[0].as: ",
                                                     "plain file name"),
            "    - {source: a.conf, as: /tmp/x}\n": ("s.yaml:5: server.files[0].as: ",
                                                   "plain file name"),
        }
        for files, (where, what) in cases.items():
            with self.subTest(files=files):
                msg = error_of(base + files)
                self.assertTrue(msg.startswith(where), msg)
                self.assertIn(what, msg)
        # The same rule for a variant's server and a helper.
        msg = error_of("server: {target: '//a:b'}\nvariants:\n  v:\n    helpers:\n"
                       "      - {name: h, command: x, files: [{source: /etc/hosts}]}\n")
        self.assertTrue(msg.startswith("s.yaml:5: variants.v.helpers[0].files[0].source: "), msg)
        # With the tree known, a source must exist in it.
        root = os.environ.get("TEST_TMPDIR", "/tmp")
        with open(os.path.join(root, "here.conf"), "w", encoding="utf-8") as f:
            f.write("listen {port};\n")
        ok = base + "    - {source: here.conf}\n"
        self.assertEqual(sc.parse_scenario(ok, "s.yaml", root).data["server"]["files"],
                         [{"source": "here.conf", "as": None}])
        with raises_scenario_error() as e:
            sc.parse_scenario(base + "    - {source: missing.conf}\n", "s.yaml", root)
        self.assertIn("s.yaml:5: server.files[0].source: 'missing.conf' is not a file of",
                      str(e.exception))

    def test_the_name_is_a_plain_name(self):
        for bad in ("../../../../p1evil_out", "a/b", "", "-x"):
            with self.subTest(name=bad):
                msg = error_of(f"name: '{bad}'\nserver: {{target: '//a:b'}}\n")
                self.assertTrue(msg.startswith("s.yaml:1: name: a letter followed by"), msg)

    def test_values_each_iteration_would_refuse_are_refused_at_load(self):
        base = "server:\n  command: x\n  args: ['{port}']\n"
        cases = {
            "duration: 0s\n": "s.yaml:4: duration: the measured load must last longer than 0s",
            "duration: 25h\n": 's.yaml:4: duration: duration "25h" is longer than a day',
            "warmup: 1441m\n": "s.yaml:4: warmup: duration \"1441m\" is longer than a day",
            "first_request: {path: plaintext}\n": "s.yaml:4: first_request.path: must start "
                                                   "with '/'",
            "load: {agents: ['127.0.0.1:0']}\n": "the port must be 1 to 65535",
            "load: {agents: ['h:65536']}\n": "the port must be 1 to 65535",
            "helpers: [{name: h, command: x, args: ['{port:other}']}]\n":
                "s.yaml:4: helpers[0].args[0]: unknown placeholder {port:other}",
            "variants: {v: {server_args: ['{file:missing.conf}']}}\n":
                "s.yaml:4: variants.v.server_args[0]: unknown placeholder {file:missing.conf}",
        }
        for extra, what in cases.items():
            with self.subTest(extra=extra):
                self.assertIn(what, error_of(base + extra))
        msg = error_of("server:\n  command: x\n  args: ['{port}', '{nonexistent_placeholder}']\n")
        self.assertTrue(msg.startswith("s.yaml:3: server.args[1]: unknown placeholder "
                                       "{nonexistent_placeholder} (known: host, port,"), msg)
        # The placeholders a side has: its helpers' ports and its files' names.
        sc.parse_scenario(base + "variants:\n  v:\n    server_args: ['{port:h}', '{file:c}']\n"
                          "    helpers: [{name: h, command: x, args: ['{port:h}'], "
                          "files: [{source: a.conf, as: c}]}]\n", "s.yaml")
        self.assertEqual(sc.parse_duration("24h"), 86400)
        with self.assertRaises(ValueError):
            sc.parse_duration("86401s")

    def test_readme_documents_every_key(self):
        with open(os.path.join("tools", "README.md"), encoding="utf-8") as f:
            readme = f.read()
        for line in sc.schema_markdown().splitlines():
            m = re.match(r"^\| `([a-z_]+)` \|", line)
            if m:
                self.assertIn(f"`{m.group(1)}`", readme)
        self.assertIn(sc.schema_markdown(), readme, "regenerate the schema tables of "
                      "tools/README.md: python3 -c 'from tools.driver import scenario; "
                      "print(scenario.schema_markdown())'")


if __name__ == "__main__":
    unittest.main()
