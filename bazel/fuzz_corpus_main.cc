// main() for fuzz targets built without libFuzzer (sluice_cc_fuzz in bazel/sluice.bzl): feeds
// committed inputs through LLVMFuzzerTestOneInput, so a plain `bazel test` (GCC) replays every
// fuzz corpus.
//
// Usage: fuzz_target FILE_OR_DIR...
//
// Directories are walked recursively and their regular files replayed in sorted path order, so a
// failure reproduces the same way every time. Each input is copied into a heap buffer of exactly
// its size, so an ASan build catches a read past the end. Exits 1 when there is no input at all or
// an input cannot be read; a bug in the target crashes the process (and a sanitizer reports it).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;

// Appends the regular files named by `arg` (a file, or a directory walked recursively) to `out`.
// Returns false, with a message on stderr, if `arg` does not exist or cannot be walked.
bool CollectInputs(const fs::path& arg, std::vector<fs::path>& out) {
  std::error_code error;
  if (fs::is_regular_file(arg, error)) {
    out.push_back(arg);
    return true;
  }
  if (!fs::is_directory(arg, error)) {
    std::fprintf(stderr, "fuzz_corpus_main: %s: not a file or directory\n", arg.c_str());
    return false;
  }
  fs::recursive_directory_iterator it(arg, fs::directory_options::follow_directory_symlink, error);
  for (; !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (it->is_regular_file(error)) out.push_back(it->path());
  }
  if (error) {
    std::fprintf(stderr, "fuzz_corpus_main: %s: %s\n", arg.c_str(), error.message().c_str());
    return false;
  }
  return true;
}

// Reads `path` into a buffer of exactly its size. Returns nullptr (size 0) for an empty file and
// false if the file cannot be read.
bool ReadInput(const fs::path& path, std::unique_ptr<uint8_t[]>& data, size_t& size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return false;
  size = bytes.size();
  data.reset(size == 0 ? nullptr : new uint8_t[size]);
  std::copy(bytes.begin(), bytes.end(), data.get());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);

  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (!CollectInputs(argv[i], inputs)) return 1;
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "fuzz_corpus_main: no inputs (usage: %s FILE_OR_DIR...)\n", argv[0]);
    return 1;
  }
  std::sort(inputs.begin(), inputs.end());

  for (const fs::path& path : inputs) {
    std::unique_ptr<uint8_t[]> data;
    size_t size = 0;
    if (!ReadInput(path, data, size)) {
      std::fprintf(stderr, "fuzz_corpus_main: cannot read %s\n", path.c_str());
      return 1;
    }
    // libFuzzer never passes a null pointer, even for an empty input.
    static const uint8_t kEmpty = 0;
    LLVMFuzzerTestOneInput(size == 0 ? &kEmpty : data.get(), size);
  }
  std::printf("fuzz_corpus_main: replayed %zu inputs\n", inputs.size());
  return 0;
}
