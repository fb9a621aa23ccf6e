// The numeric flags of the driver's small C++ tools (proc_sampler, syscall_cost): `--name=N` or
// `--name N`, the whole value a number within [min, max].
//
//   long pid = 0;
//   if (!NumberFlag("proc_sampler", argc, argv, &i, "--pid", 1, INT_MAX, &pid)) { /* not it */ }
//
// Thread-safety: for main(), before any thread starts (a bad value exits the process).
#ifndef SLUICE_TOOLS_NUMBER_FLAG_H_
#define SLUICE_TOOLS_NUMBER_FLAG_H_

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace sluice::tools {

// Whether argv[*i] is flag `name`; if so its value (argv[*i + 1] for the spaced form, and *i moves
// past it) goes into *out. A missing value, one that is not wholly a number, or one outside
// [min, max] prints "PROGRAM: NAME: needs a number MIN-MAX" and exits 2.
inline bool NumberFlag(std::string_view program, int argc, char** argv, int* i,
                       std::string_view name, long min, long max, long* out) {
  const std::string_view arg = argv[*i];
  if (!arg.starts_with(name)) return false;
  std::string_view value = arg.substr(name.size());
  bool has_value = true;
  if (value.empty()) {
    has_value = *i + 1 < argc;
    if (has_value) value = argv[++*i];
  } else if (value.front() == '=') {
    value.remove_prefix(1);
  } else {
    return false;  // a longer name
  }
  long v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (!has_value || ec != std::errc() || end != value.data() + value.size() || v < min || v > max) {
    std::fprintf(stderr, "%.*s: %.*s: needs a number %ld-%ld (not \"%.*s\")\n",
                 static_cast<int>(program.size()), program.data(), static_cast<int>(name.size()),
                 name.data(), min, max, static_cast<int>(value.size()), value.data());
    std::exit(2);
  }
  *out = v;
  return true;
}

}  // namespace sluice::tools

#endif  // SLUICE_TOOLS_NUMBER_FLAG_H_
