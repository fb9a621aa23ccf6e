// sluice's version, and what `--version` prints on every binary: the version and the pinned
// Debian libraries the binary was built against.
//
//   std::fputs(sluice::VersionText("plaintext").c_str(), stdout);
//   // plaintext (sluice 0.9.0)
//   //   built with g++ 4:12.2.0-3; nghttp2 1.52.0-1+deb12u3; ...
//
// Thread-safety: stateless.
#ifndef SLUICE_CORE_VERSION_H_
#define SLUICE_CORE_VERSION_H_

#include <string>
#include <string_view>

#include "core/sluice_version.h"

namespace sluice {

// Semantic version of the project (bazel/version.bzl; the installed library, the .pc and CMake
// files say the same).
inline constexpr char kVersion[] = SLUICE_VERSION;

// "PROGRAM (sluice VERSION)" and a line of the pinned libraries, newline-terminated.
std::string VersionText(std::string_view program);

}  // namespace sluice

#endif  // SLUICE_CORE_VERSION_H_
