// Fuzzes the load generator's HTTP/2 client session (loadgen/h2_session.h) with what a server
// could send: the session opens a few streams, then the input is fed to it as the server's bytes.
//
// Input: bit 0 of byte 0 says the requests carry a body (a POST of 100 bytes), bits 1-4 how many
// streams open before the server's first byte (1..16); byte 1 chooses how the rest is split into
// deliveries (0: all at once). The rest (from byte 2) is the server's byte stream. Each input runs
// twice: delivered whole, and in pieces (each piece after what the session left unconsumed).
//
// Checked, besides "no crash, no sanitizer report":
// - consumed counts stay inside what was delivered;
// - every completion (response or reset) names a stream we opened and not completed before, and
//   open_streams() is what was opened minus what completed;
// - the outcome does not depend on how the input was delivered: the same completions in the
//   same order, the same final status, the same DATA byte count, the same bytes owed back.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/memory_pool.h"
#include "core/pipe.h"
#include "core/status.h"
#include "loadgen/h2_session.h"

namespace sluice::loadgen {
namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "h2_session_fuzz: invariant violated: %s\n", what);
  std::abort();
}

// What one delivery schedule made of the input.
struct Outcome {
  // (stream, status or -(error code) - 1); 64 bits wide, since a reset's code is any 32-bit value
  std::vector<std::pair<uint32_t, int64_t>> completions;
  bool failed = false;
  StatusCode code = StatusCode::kOk;
  uint64_t data_bytes = 0;
  std::string owed;  // what the session wrote after its first requests
  bool operator==(const Outcome& o) const {
    return completions == o.completions && failed == o.failed && code == o.code &&
           data_bytes == o.data_bytes && owed == o.owed;
  }
};

class Recorder final : public H2Session::Listener {
 public:
  explicit Recorder(Outcome* outcome) : outcome_(outcome) {}
  void OnResponse(uint32_t stream_id, uint16_t status) override {
    Complete(stream_id);
    outcome_->completions.emplace_back(stream_id, status);
  }
  void OnStreamReset(uint32_t stream_id, http2::ErrorCode code) override {
    Complete(stream_id);
    outcome_->completions.emplace_back(stream_id,
                                       -static_cast<int64_t>(static_cast<uint32_t>(code)) - 1);
  }
  void Opened(uint32_t id) { open_.insert(id); }
  size_t open() const { return open_.size(); }

 private:
  void Complete(uint32_t id) { Check(open_.erase(id) == 1, "a completion for a stream not open"); }
  Outcome* const outcome_;
  std::set<uint32_t> open_;
};

// Feeds `input` to a fresh session in deliveries ending at the offsets in `cuts` (ascending, the
// last one input.size()); what the session does not consume stays for the next delivery.
Outcome Run(MemoryPool* pool, std::string_view input, bool with_body, int streams,
            const std::vector<size_t>& cuts) {
  std::vector<std::pair<std::string, std::string>> fields = {
      {":method", with_body ? "POST" : "GET"},
      {":scheme", "http"},
      {":authority", "localhost"},
      {":path", "/fuzz"}};
  H2Session session(H2Session::Options{.max_streams = 16}, fields,
                    with_body ? std::string(100, 'b') : std::string());
  Outcome outcome;
  Recorder recorder(&outcome);
  std::string out;
  session.Start(&out);
  for (int i = 0; i < streams && session.CanSend(); ++i) {
    const uint32_t id = session.SendRequest(&out);
    Check(id != 0, "stream ids ran out at the start");
    recorder.Opened(id);
  }
  out.clear();

  Pipe pipe(PipeOptions{.pool = pool, .pause_threshold = 0});
  size_t delivered = 0;
  for (size_t cut : cuts) {
    if (!pipe.writer().Write(input.substr(delivered, cut - delivered)).ok()) std::abort();
    delivered = cut;
    FlushResult flushed;
    if (!pipe.writer().Flush(&flushed, nullptr)) std::abort();
    ReadResult read;
    if (!pipe.reader().Read(&read, nullptr)) continue;  // nothing new (an empty piece)
    size_t consumed = 0;
    Status s = session.OnInput(read.buffer, 0, &consumed, &out, &recorder);
    Check(consumed <= read.buffer.size(), "consumed more than was delivered");
    if (!pipe.reader().AdvanceTo(consumed, read.buffer.size()).ok()) std::abort();
    if (!s.ok()) {
      outcome.failed = true;
      outcome.code = s.code();
      break;
    }
    Check(session.open_streams() == recorder.open(), "open_streams() disagrees");
  }
  outcome.data_bytes = session.data_bytes();
  outcome.owed = std::move(out);
  pipe.writer().Complete();
  pipe.reader().Complete();
  return outcome;
}

}  // namespace
}  // namespace sluice::loadgen

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;  // NOLINT: a fuzz entry point
  if (size < 2) return 0;
  static MemoryPool* pool = new MemoryPool(MemoryPoolOptions{.block_size = 4096});
  const bool with_body = (data[0] & 1) != 0;
  const int streams = 1 + ((data[0] >> 1) & 15);
  const unsigned pieces_seed = data[1];
  const std::string_view input(reinterpret_cast<const char*>(data + 2), size - 2);

  const loadgen::Outcome whole = loadgen::Run(pool, input, with_body, streams, {input.size()});
  if (pieces_seed == 0 || input.empty()) return 0;
  // Pieces of 1..pieces_seed bytes, varying with the position.
  std::vector<size_t> cuts;
  size_t at = 0;
  unsigned step = pieces_seed;
  while (at < input.size()) {
    at = std::min(input.size(), at + 1 + step % pieces_seed);
    cuts.push_back(at);
    step = step * 131 + 7;
  }
  const loadgen::Outcome split = loadgen::Run(pool, input, with_body, streams, cuts);
  loadgen::Check(whole == split, "the outcome depends on how the input was delivered");
  return 0;
}
