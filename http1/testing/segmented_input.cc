#include "http1/testing/segmented_input.h"

#include <cstdio>
#include <cstdlib>

namespace sluice::http1::testing {

namespace {
void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "SegmentedInput: %s\n", what);
  std::abort();
}
}  // namespace

SegmentedInput::SegmentedInput(MemoryPool* pool)
    : pool_(pool), pipe_(PipeOptions{.pool = pool, .pause_threshold = 0}) {}

SegmentedInput::SegmentedInput(MemoryPool* pool, std::initializer_list<std::string_view> pieces)
    : SegmentedInput(pool) {
  for (std::string_view piece : pieces) {
    if (piece.empty()) continue;
    Break();
    Append(piece);
  }
}

void SegmentedInput::Append(std::string_view bytes) {
  Check(pipe_.writer().Write(bytes).ok(), "Write failed");
}

void SegmentedInput::Break() {
  // A request for a whole block cannot be met by a partly used one: the writer moves on to a new
  // segment. An untouched segment has room and stays, so no empty segment is made.
  (void)pipe_.writer().GetSpan(pool_->block_size());
}

const BufferSequence& SegmentedInput::Read() {
  if (reading_) Consume(0);
  FlushResult flushed;
  Check(pipe_.writer().Flush(&flushed, nullptr), "Flush did not complete");
  Check(pipe_.reader().Read(&read_, nullptr), "Read found nothing new");
  Check(read_.status.ok(), "Read failed");
  reading_ = true;
  return read_.buffer;
}

void SegmentedInput::Consume(size_t consumed) {
  Check(reading_, "Consume without Read");
  Check(pipe_.reader().AdvanceTo(consumed, read_.buffer.size()).ok(), "AdvanceTo failed");
  reading_ = false;
}

}  // namespace sluice::http1::testing
