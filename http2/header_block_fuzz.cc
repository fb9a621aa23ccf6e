// Fuzzes HpackDecoder with a header block split into fragments, as HEADERS + CONTINUATION frames
// deliver it.
//
// Input: byte 0 is the fragment size (0: the block in one fragment); byte 1 chooses the decoder's
// maximum table size (bits 0-1: 4096, 0, 256, 65536) and whether the same bytes are then decoded
// again as a second block on the same decoder (bit 2), which exercises the dynamic table the first
// block left; the rest is the block.
//
// Checked, besides "no crash, no sanitizer report":
// - the fields, the outcome and (for good blocks) the size-update count do not depend on the
//   fragment size: the fragmented decoder agrees with one fed whole blocks;
// - after an error nothing more is fed, and a decoder that failed keeps failing without emitting;
// - fields decoded successfully re-encode with HpackEncoder and decode to the same fields.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http2/hpack.h"

namespace sluice::http2 {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "header_block_fuzz: invariant violated: %s\n", what);
  std::abort();
}

HpackDecoder::FieldCallback Collect(Fields* fields) {
  return [fields](std::string_view name, std::string_view value) {
    fields->emplace_back(std::string(name), std::string(value));
  };
}

struct Outcome {
  bool ok = true;
  Fields fields;
};

// Feeds `block` in fragments of `fragment_size` bytes (0: one fragment), stopping at an error.
Outcome DecodeInFragments(HpackDecoder& decoder, std::span<const uint8_t> block,
                          size_t fragment_size) {
  Outcome outcome;
  if (fragment_size == 0) fragment_size = block.size();
  size_t offset = 0;
  do {
    const size_t n = std::min(fragment_size, block.size() - offset);
    const bool final = offset + n == block.size();
    const Status s = decoder.Decode(block.subspan(offset, n), final, Collect(&outcome.fields));
    offset += n;
    if (!s.ok()) {
      Check(s.code() == StatusCode::kInvalidArgument, "decode error is not INVALID_ARGUMENT");
      Check(!s.message().empty(), "decode error without a message");
      outcome.ok = false;
      return outcome;
    }
  } while (offset < block.size());
  return outcome;
}

// A decoder that failed must keep failing, and emit nothing, whatever it is given.
void CheckStaysFailed(HpackDecoder& decoder) {
  static constexpr uint8_t kIndexedMethodGet = 0x82;
  Fields fields;
  const Status s = decoder.Decode({&kIndexedMethodGet, 1}, true, Collect(&fields));
  Check(!s.ok(), "decoder usable after an error");
  Check(fields.empty(), "decoder emitted after an error");
}

void CheckReencoding(const Fields& fields) {
  std::vector<HeaderField> header_fields;
  for (const auto& [name, value] : fields) header_fields.push_back({name, value});
  HpackEncoder encoder;
  std::string block;
  Check(encoder.Encode(header_fields, &block).ok(), "re-encoding failed");
  HpackDecoder decoder;
  Fields again;
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(block.data()),
                                       block.size());
  Check(decoder.Decode(bytes, true, Collect(&again)).ok(), "re-encoded block does not decode");
  Check(again == fields, "re-encoded block decodes to other fields");
}

void Run(std::span<const uint8_t> block, size_t fragment_size, uint32_t max_table_size,
         bool twice) {
  HpackDecoder fragmented(max_table_size);
  HpackDecoder whole(max_table_size);
  for (int round = 0; round < (twice ? 2 : 1); ++round) {
    const Outcome a = DecodeInFragments(fragmented, block, fragment_size);
    const Outcome b = DecodeInFragments(whole, block, 0);
    Check(a.ok == b.ok, "outcome depends on fragmentation");
    Check(a.fields == b.fields, "fields depend on fragmentation");
    if (!a.ok) {
      // The counts may differ here: the fragmented decoder never saw the bytes after the error.
      CheckStaysFailed(fragmented);
      CheckStaysFailed(whole);
      return;
    }
    Check(fragmented.table_size_updates() == whole.table_size_updates(),
          "size-update count depends on fragmentation");
    CheckReencoding(a.fields);
  }
}

}  // namespace
}  // namespace sluice::http2

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static constexpr uint32_t kTableSizes[] = {4096, 0, 256, 65536};
  sluice::http2::Run({data + 2, size - 2}, data[0], kTableSizes[data[1] & 3], (data[1] & 4) != 0);
  return 0;
}
