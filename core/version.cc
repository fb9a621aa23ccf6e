#include "core/version.h"

#include <sluice_deps/versions.h>

#include <cstring>

namespace sluice {

std::string VersionText(std::string_view program) {
  std::string out(program);
  out += " (sluice ";
  out += kVersion;
  out += ")\n  built with";
  // The toolchain and the libraries a sluice binary links (Debian package versions).
  static constexpr const char* kLinked[] = {"gcc",    "nghttp2", SLUICE_VERSION_TLS,
                                            "abseil", "grpc",    "protobuf"};
  bool first = true;
  for (const char* name : kLinked) {
    for (const auto& p : deps::kDebianPackages) {
      if (std::strcmp(p.name, name) != 0 || p.version[0] == '\0') continue;
      out += first ? " " : "; ";
      first = false;
      out += p.package;
      out += ' ';
      out += p.version;
    }
  }
  out += '\n';
  return out;
}

}  // namespace sluice
