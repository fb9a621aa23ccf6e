// Test support: BufferSequences split into segments exactly where a test says, made by a real
// Pipe (so the parser sees what a connection sees: pooled segments, the writer's own layout).
//
//   sluice::http1::testing::SegmentedInput input(&pool());   // pool block size 4096
//   input.Append("GET / HT");
//   input.Break();                                  // what follows starts a new segment
//   input.Append("TP/1.1\r\nHost: a\r\n\r\n");
//   const sluice::BufferSequence& buffer = input.Read();   // two chunks
//   input.Consume(0);                               // AdvanceTo(0, all): wait for more
//   input.Append("...");                            // grows the last segment
//   input.Read();
//
// Every Append-ed piece must fit in one block (Break forces a new block by asking for a whole
// one). Thread-safety: thread-compatible, like the Pipe inside.
#ifndef SLUICE_HTTP1_TESTING_SEGMENTED_INPUT_H_
#define SLUICE_HTTP1_TESTING_SEGMENTED_INPUT_H_

#include <cstddef>
#include <initializer_list>
#include <string_view>

#include "core/memory_pool.h"
#include "core/pipe.h"

namespace sluice::http1::testing {

class SegmentedInput {
 public:
  explicit SegmentedInput(MemoryPool* pool);
  // Each piece in its own segment (empty pieces are skipped).
  SegmentedInput(MemoryPool* pool, std::initializer_list<std::string_view> pieces);
  SegmentedInput(const SegmentedInput&) = delete;
  SegmentedInput& operator=(const SegmentedInput&) = delete;

  // Appends to the current segment.
  void Append(std::string_view bytes);
  // Makes the next Append start a new segment.
  void Break();
  // Publishes what was appended and returns every unconsumed byte. A previous read still
  // outstanding is first released with Consume(0). Aborts if nothing new was appended.
  const BufferSequence& Read();
  // AdvanceTo(consumed, everything): the next Read waits for new bytes.
  void Consume(size_t consumed);

 private:
  MemoryPool* const pool_;
  Pipe pipe_;
  ReadResult read_;
  bool reading_ = false;
};

}  // namespace sluice::http1::testing

#endif  // SLUICE_HTTP1_TESTING_SEGMENTED_INPUT_H_
