#include "http1/testing/split_input.h"

#include <cstdio>
#include <cstdlib>

#include "core/memory_pool.h"

namespace sluice::http1::testing {

namespace {

MemoryPool* Pool() {
  static MemoryPool* pool = new MemoryPool(MemoryPoolOptions{.block_size = 4096});
  return pool;
}

size_t SplitPoint(std::string_view bytes, uint8_t selector) {
  return bytes.size() * selector / 255;
}

const BufferSequence& Read(SegmentedInput* segments, std::string_view bytes) {
  static const BufferSequence* const kEmpty = new BufferSequence();
  if (bytes.empty()) return *kEmpty;  // SegmentedInput reads only what was appended
  const BufferSequence& buffer = segments->Read();
  if (buffer.ToString() != bytes) {
    std::fprintf(stderr, "SplitInput: the pipe changed the input\n");
    std::abort();
  }
  return buffer;
}

}  // namespace

SplitInput::SplitInput(std::string_view bytes, uint8_t selector)
    : segments_(Pool(), {bytes.substr(0, SplitPoint(bytes, selector)),
                         bytes.substr(SplitPoint(bytes, selector))}),
      buffer_(&Read(&segments_, bytes)) {}

}  // namespace sluice::http1::testing
