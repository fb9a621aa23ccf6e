"""Installs sluice for builds outside Bazel (`./bazelw run -c opt //:install -- --prefix=DIR`).

Writes, under DIR and nowhere else:
  lib/libsluice.a                      the library (//:sluice)
  include/sluice/...                   the public headers and every project header they include
                                       (#include "core/status.h" works with -IDIR/include/sluice)
  lib/pkgconfig/sluice.pc              for pkg-config (Cflags, Libs with the Debian libraries)
  lib/cmake/sluice/sluiceConfig.cmake  find_package(sluice): the imported target sluice::sluice
  lib/cmake/sluice/sluiceConfigVersion.cmake

Exit status: 0 installed; 2 for a bad command line (no --prefix, a relative one); 1 if a file
could not be written.
"""

import argparse
import os
import re
import shutil
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def runfiles_root():
    """Where Bazel put the runfiles of //:install (the workspace's files by their paths)."""
    for candidate in (os.environ.get("RUNFILES_DIR"), os.path.abspath(sys.argv[0]) + ".runfiles",
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")):
        if candidate and os.path.isfile(os.path.join(candidate, "sluice", "libsluice.a")):
            return os.path.join(candidate, "sluice")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.isfile(os.path.join(here, "libsluice.a")):
        return here
    return None


def header_closure(root, public, available):
    """The public headers and the project headers they include, transitively (by path)."""
    todo = list(public)
    seen = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        with open(os.path.join(root, path), encoding="utf-8") as f:
            for included in INCLUDE.findall(f.read()):
                if included in available and included not in seen:
                    todo.append(included)
    return sorted(seen)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def pc_file(prefix, version, flags):
    libs = " ".join(flags)
    return f"""prefix={prefix}
libdir=${{prefix}}/lib
includedir=${{prefix}}/include/sluice

Name: sluice
Description: An embeddable C++20 HTTP/1.1 and HTTP/2 server core
Version: {version}
Cflags: -I${{includedir}}
# A static library: its dependencies are needed at link time, so Libs carries them as well.
Libs: -L${{libdir}} -lsluice {libs}
Libs.private: {libs}
Requires.private: libnghttp2
"""


def cmake_config(flags):
    options = ";".join(f for f in flags)
    return f"""# find_package(sluice) for sluice installed with its //:install (see the project's README).
# Defines the imported target sluice::sluice: the static library, its headers (C++20) and the
# Debian libraries it links.
get_filename_component(_sluice_prefix "${{CMAKE_CURRENT_LIST_DIR}}/../../.." ABSOLUTE)
if(NOT TARGET sluice::sluice)
  add_library(sluice::sluice STATIC IMPORTED)
  set_target_properties(sluice::sluice PROPERTIES
    IMPORTED_LOCATION "${{_sluice_prefix}}/lib/libsluice.a"
    INTERFACE_INCLUDE_DIRECTORIES "${{_sluice_prefix}}/include/sluice"
    INTERFACE_COMPILE_FEATURES cxx_std_20
    # Link libraries, not link options: these must follow libsluice.a on the link line.
    INTERFACE_LINK_LIBRARIES "{options}")
endif()
unset(_sluice_prefix)
"""


def cmake_version(version):
    return f"""# The version of the installed sluice; any request of the same major version is met by a
# newer or equal one.
set(PACKAGE_VERSION "{version}")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  string(REGEX MATCH "^[0-9]+" _installed_major "${{PACKAGE_VERSION}}")
  string(REGEX MATCH "^[0-9]+" _wanted_major "${{PACKAGE_FIND_VERSION}}")
  if(PACKAGE_FIND_VERSION STREQUAL "" OR _installed_major STREQUAL _wanted_major)
    set(PACKAGE_VERSION_COMPATIBLE TRUE)
  else()
    set(PACKAGE_VERSION_COMPATIBLE FALSE)
  endif()
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
"""


def main(argv):
    parser = argparse.ArgumentParser(
        prog="install", description="Installs libsluice.a, its headers, sluice.pc and the CMake "
        "package files under --prefix.")
    parser.add_argument("--prefix", metavar="DIR",
                        help="absolute directory to install into (created if missing)")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    args = parser.parse_args(argv)
    root = runfiles_root()
    if root is None:
        print("install: cannot find libsluice.a next to the installer; run it with "
              "`./bazelw run -c opt //:install -- --prefix=DIR`", file=sys.stderr)
        return 1
    with open(os.path.join(root, "core", "sluice_version.h"), encoding="utf-8") as f:
        version = re.search(r'#define SLUICE_VERSION "([^"]+)"', f.read()).group(1)
    if args.version:
        print(f"sluice {version}")
        return 0
    if not args.prefix:
        print("install: --prefix=DIR is required (an absolute directory to install into)",
              file=sys.stderr)
        return 2
    if not os.path.isabs(args.prefix):
        print(f"install: --prefix must be an absolute path (not {args.prefix!r})", file=sys.stderr)
        return 2
    prefix = os.path.realpath(args.prefix)
    if os.path.exists(prefix) and not os.path.isdir(prefix):
        print(f"install: --prefix {prefix} exists and is not a directory", file=sys.stderr)
        return 2

    with open(os.path.join(root, "sluice.headers"), encoding="utf-8") as f:
        available = {line.strip() for line in f if line.strip()}
    with open(os.path.join(root, "sluice.link_flags"), encoding="utf-8") as f:
        flags = [line.strip() for line in f if line.strip()]
    with open(os.path.join(root, "sluice.public_headers"), encoding="utf-8") as f:
        public = [line.strip() for line in f if line.strip()]
    headers = header_closure(root, public, available)

    def inside(path):
        # Every destination is built from prefix and project paths; this keeps it so.
        real = os.path.realpath(path)
        if os.path.commonpath([real, prefix]) != prefix:
            raise OSError(f"{path} is outside {prefix}")
        return path

    try:
        lib = inside(os.path.join(prefix, "lib", "libsluice.a"))
        os.makedirs(os.path.dirname(lib), exist_ok=True)
        shutil.copyfile(os.path.join(root, "libsluice.a"), lib)
        for h in headers:
            dest = inside(os.path.join(prefix, "include", "sluice", h))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copyfile(os.path.join(root, h), dest)
        write(inside(os.path.join(prefix, "lib", "pkgconfig", "sluice.pc")),
              pc_file(prefix, version, flags))
        cmake_dir = os.path.join(prefix, "lib", "cmake", "sluice")
        write(inside(os.path.join(cmake_dir, "sluiceConfig.cmake")), cmake_config(flags))
        write(inside(os.path.join(cmake_dir, "sluiceConfigVersion.cmake")),
              cmake_version(version))
    except OSError as e:
        print(f"install: {e}", file=sys.stderr)
        return 1
    print(f"installed sluice {version} into {prefix}: lib/libsluice.a, {len(headers)} headers "
          "under include/sluice, lib/pkgconfig/sluice.pc, lib/cmake/sluice/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
