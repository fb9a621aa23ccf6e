// Fuzz support: a fuzz input as a connection would read it, in two pipe segments split where a
// byte of the input says, so the parsers' fuzz drivers can check that the outcome does not depend
// on segmentation. The segments come from one process-wide pool of 4 KiB blocks; a part longer
// than a block spans more segments.
//
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//     if (size == 0) return 0;
//     const std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
//     const sluice::http1::testing::SplitInput split(stream, data[0]);
//     ... parse split.buffer() and `stream`, compare ...
//   }
//
// Thread-safety: thread-compatible, like the Pipe inside (the pool they share is thread-safe).
#ifndef SLUICE_HTTP1_TESTING_SPLIT_INPUT_H_
#define SLUICE_HTTP1_TESTING_SPLIT_INPUT_H_

#include <cstdint>
#include <string_view>

#include "core/pipe.h"
#include "http1/testing/segmented_input.h"

namespace sluice::http1::testing {

class SplitInput {
 public:
  // `bytes` with a segment break after bytes.size() * selector / 255 bytes (none at either end).
  // Aborts if the pipe does not give `bytes` back unchanged.
  SplitInput(std::string_view bytes, uint8_t selector);
  SplitInput(const SplitInput&) = delete;
  SplitInput& operator=(const SplitInput&) = delete;

  // Every byte of the input (an empty sequence for empty input). Valid as long as this object.
  const BufferSequence& buffer() const { return *buffer_; }

 private:
  SegmentedInput segments_;
  const BufferSequence* buffer_;
};

}  // namespace sluice::http1::testing

#endif  // SLUICE_HTTP1_TESTING_SPLIT_INPUT_H_
