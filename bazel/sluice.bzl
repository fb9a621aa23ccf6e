"""Project macros: every sluice C++ target goes through one of these.

They set C++20 and warnings-as-errors for our code and the tags the configs filter on, in one place.
Includes are relative to the workspace root (#include "core/pipe.h"). Visibility is passed through
unchanged: each package's BUILD.bazel sets its default (private unless it opts in).

    load("//bazel:sluice.bzl", "sluice_cc_library", "sluice_cc_test")

    sluice_cc_library(
        name = "pipe",
        srcs = ["pipe.cc"],
        hdrs = ["pipe.h"],
        deps = [":memory_pool", "//third_party:abseil"],
    )

    sluice_cc_test(
        name = "pipe_test",
        srcs = ["pipe_test.cc"],
        deps = [":pipe"],  # //third_party:gtest (gtest + gmock + main) is added
    )

Tags understood by .bazelrc and .ci/run (pass them in `tags`):
  "no_asan"  skipped by `bazel test --config=asan`
  "no_tsan"  skipped by `bazel test --config=tsan`
"""

load("@sluice_deps//:versions.bzl", "DEBIAN_VERSIONS")

# Our code: C++20 (also set for everything by .bazelrc), all warnings, as errors.
SLUICE_COPTS = [
    "-std=c++20",
    "-Wall",
    "-Wextra",
    "-Werror",
]

# Code we generate but do not write (protoc output): compiled without -Werror, so a protoc upgrade
# cannot break the build on a warning in its output.
SLUICE_GENERATED_COPTS = ["-std=c++20"]

_GTEST = "//third_party:gtest"
_GTEST_NOMAIN = "//third_party:gtest_nomain"
_BENCHMARK = "//third_party:benchmark"
_BENCHMARK_MAIN = "//third_party:benchmark_main"
_FUZZ_CORPUS_MAIN = "//bazel:fuzz_corpus_main"
_LIBFUZZER = "//bazel:libfuzzer"  # config_setting: --config=fuzz

def sluice_cc_library(name, copts = [], **kwargs):
    """A cc_library of our code. Takes every cc_library attribute (srcs, hdrs, deps, ...)."""
    native.cc_library(
        name = name,
        copts = SLUICE_COPTS + copts,
        **kwargs
    )

def sluice_cc_binary(name, copts = [], **kwargs):
    """A cc_binary of our code. Takes every cc_binary attribute."""
    native.cc_binary(
        name = name,
        copts = SLUICE_COPTS + copts,
        **kwargs
    )

def _has_any(labels, candidates):
    for label in labels:
        for candidate in candidates:
            if label == candidate or label == "@" + candidate or label == "@sluice" + candidate:
                return True
    return False

def sluice_cc_test(
        name,
        deps = [],
        size = "small",
        copts = [],
        linkstatic = True,
        configured_deps = [],
        **kwargs):
    """A googletest cc_test of our code, size "small" unless given.

    Links //third_party:gtest (gtest + gmock + gmock's main) unless deps already name it or
    //third_party:gtest_nomain (for a test with its own main). `configured_deps`: more deps, which
    may be a select() (deps must be a plain list). Takes every cc_test attribute (srcs, data,
    args, tags, shard_count, ...). Linked statically by default.
    """
    if not _has_any(deps, [_GTEST, _GTEST_NOMAIN]):
        deps = deps + [_GTEST]
    native.cc_test(
        name = name,
        deps = deps + configured_deps,
        size = size,
        copts = SLUICE_COPTS + copts,
        linkstatic = linkstatic,
        **kwargs
    )

def sluice_cc_benchmark(
        name,
        srcs,
        deps = [],
        copts = [],
        args = [],
        smoke_args = ["--benchmark_min_time=0.001"],
        tags = [],
        visibility = None,
        testonly = False):
    """A google benchmark binary `name` plus a test `name_smoke` that runs it once, briefly.

    `bazel run -c opt //pkg:name` measures (args are its default arguments). `name_smoke` runs
    every benchmark for ~1 ms (smoke_args) so plain `bazel test //...` proves the benchmarks run
    without timing anything; it is tagged "benchmark_smoke" (add "no_tsan" etc. through tags).
    The sources are compiled once, into `name_lib`; //third_party:benchmark_main provides main().
    """
    native.cc_library(
        name = name + "_lib",
        srcs = srcs,
        deps = deps + [_BENCHMARK],
        copts = SLUICE_COPTS + copts,
        alwayslink = True,  # BENCHMARK() registers from static initializers
        testonly = testonly,
        visibility = ["//visibility:private"],
    )
    native.cc_binary(
        name = name,
        deps = [":" + name + "_lib", _BENCHMARK_MAIN],
        args = args,
        tags = tags,
        testonly = testonly,
        visibility = visibility,
    )
    native.cc_test(
        name = name + "_smoke",
        deps = [":" + name + "_lib", _BENCHMARK_MAIN],
        args = smoke_args,
        size = "small",
        linkstatic = True,
        tags = tags + ["benchmark_smoke"],
        visibility = visibility,
    )

def sluice_cc_fuzz(
        name,
        srcs,
        deps = [],
        corpus = None,
        copts = [],
        tags = [],
        size = "small",
        visibility = None):
    """A libFuzzer target `name` and a test `name_corpus_test` that replays its corpus.

    srcs define `extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)` (and
    optionally LLVMFuzzerInitialize). `corpus` is a directory of this package (default
    "<name>_corpus") whose files are committed inputs.

    - `name_corpus_test` (any config, GCC by default): feeds every file of the corpus through
      LLVMFuzzerTestOneInput with bazel/fuzz_corpus_main.cc; fails on a crash or an empty corpus.
    - `name`: under --config=fuzz (clang) a libFuzzer binary:
          bazel run --config=fuzz //pkg:name -- -max_total_time=60 /tmp/new $PWD/pkg/name_corpus
      (mkdir /tmp/new first: libFuzzer adds the inputs it finds to the first directory. Debian's
      libraries are not instrumented, so coverage feedback comes from our code only.)
      under other configs the same replay driver as the test (`name FILE_OR_DIR...`).
    """
    if corpus == None:
        corpus = name + "_corpus"
    native.cc_library(
        name = name + "_lib",
        srcs = srcs,
        deps = deps,
        copts = SLUICE_COPTS + copts,
        alwayslink = True,
        testonly = True,
        visibility = ["//visibility:private"],
    )
    native.cc_binary(
        name = name,
        deps = [":" + name + "_lib"] + select({
            _LIBFUZZER: [],
            "//conditions:default": [_FUZZ_CORPUS_MAIN],
        }),
        linkopts = select({
            _LIBFUZZER: ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        tags = tags + ["fuzz"],
        testonly = True,
        visibility = visibility,
    )
    corpus_path = native.package_name() + "/" + corpus
    native.cc_test(
        name = name + "_corpus_test",
        deps = [":" + name + "_lib", _FUZZ_CORPUS_MAIN],
        data = native.glob([corpus + "/**"]),
        args = [corpus_path],
        size = size,
        linkstatic = True,
        tags = tags,
        visibility = visibility,
    )

def _proto_srcs_label(label):
    """Label of the .proto files behind a sluice_grpc_proto target.

    '//a/b:c' -> '//a/b:c_proto_srcs', ':c' -> ':c_proto_srcs', '//a/b' -> '//a/b:b_proto_srcs'.
    """
    if ":" in label:
        return label + "_proto_srcs"
    return label + ":" + label.rsplit("/", 1)[-1] + "_proto_srcs"

def sluice_grpc_proto(
        name,
        src,
        deps = [],
        grpc = True,
        visibility = None,
        testonly = False):
    """C++ code for one .proto file, generated by Debian's protoc and grpc_cpp_plugin.

    `name` is a cc_library with foo.pb.h (and foo.grpc.pb.h if grpc) for src "foo.proto", included
    by workspace path ("pkg/foo.pb.h"). deps: other sluice_grpc_proto targets src imports
    (google/protobuf/*.proto resolve from /usr/include). With grpc, the library has gRPC's headers
    but not its libraries: the binary links one flavour, "//third_party:grpc" (TLS via OpenSSL) or
    "//third_party:grpc_unsecure" (no OpenSSL; the one for a binary that links BoringSSL). The
    compiler versions are part of the command, so a Debian upgrade of protoc or the plugin
    regenerates the code.
    """
    if not src.endswith(".proto"):
        fail("sluice_grpc_proto: src must be a .proto file: " + src)
    base = src[:-len(".proto")]
    outs = [base + ".pb.h", base + ".pb.cc"]
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    dep_srcs = [_proto_srcs_label(d) for d in deps]

    native.filegroup(
        name = name + "_proto_srcs",
        srcs = [src] + dep_srcs,
        testonly = testonly,
        visibility = visibility,
    )
    cmd = "/usr/bin/protoc --proto_path=. --cpp_out=$(GENDIR)"
    if grpc:
        cmd += " --grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin"
    native.genrule(
        name = name + "_codegen",
        srcs = [src] + dep_srcs,
        outs = outs,
        cmd = ": protobuf-compiler %s protobuf-compiler-grpc %s; %s $(location %s)" % (
            DEBIAN_VERSIONS["protoc"],
            DEBIAN_VERSIONS["grpc_plugin"],
            cmd,
            src,
        ),
        testonly = testonly,
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//third_party:protobuf"] + (["//third_party:grpc_headers"] if grpc else []),
        copts = SLUICE_GENERATED_COPTS,
        testonly = testonly,
        visibility = visibility,
    )

def sluice_py_test(name, src, data = [], args = [], size = "small", **kwargs):
    """A Python test run by Debian's /usr/bin/python3 (bazel/python_test.sh).

    `src` is the test script; `args` follow it ($(rootpath ...) of binaries in `data`). Project
    modules import by workspace path (the runfiles root is on PYTHONPATH). Takes every sh_test
    attribute (tags, timeout, ...).
    """
    native.sh_test(
        name = name,
        srcs = ["//bazel:python_test.sh"],
        args = ["$(rootpath %s)" % src] + args,
        data = [src] + data,
        size = size,
        **kwargs
    )

def sluice_boringssl_ldd_test(name, binaries, size = "small", **kwargs):
    """A test that fails if any of `binaries` loads OpenSSL's libssl.so.3 next to BoringSSL.

    BoringSSL and OpenSSL 3 cannot share a process (gRPC's OpenSSL calls bind to BoringSSL's
    symbols and crash): run this over every binary that links //third_party:boringssl.
    """
    native.sh_test(
        name = name,
        srcs = ["//bazel:boringssl_ldd_check.sh"],
        data = binaries,
        args = ["$(rootpath %s)" % b for b in binaries],
        size = size,
        **kwargs
    )

def sluice_tls_library_test(name, binaries, size = "small", **kwargs):
    """A test that each of `binaries` loads exactly the TLS library of the build configuration.

    BoringSSL by default, OpenSSL 3 under --config=openssl (//bazel/tls:openssl), never both: the
    two cannot share a process. Checked with ldd by //bazel/tls:tls_library_check.sh.
    """
    native.sh_test(
        name = name,
        srcs = ["//bazel/tls:tls_library_check.sh"],
        args = select({
            "//bazel/tls:openssl": ["openssl"],
            "//conditions:default": ["boringssl"],
        }) + ["$(rootpath %s)" % b for b in binaries],
        data = binaries,
        size = size,
        **kwargs
    )
