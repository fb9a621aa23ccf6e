// HPACK (RFC 7541) through nghttp2's deflater and inflater
// (`nghttp2_hd_*`), not nghttp2's session: sluice owns the framing and the
// connection, nghttp2 owns the compression tables.
//
//   sluice::http2::HpackEncoder encoder;
//   const sluice::http2::HeaderField fields[] = {{":status", "200"}, {"content-length", "2"}};
//   std::string block;
//   if (!encoder.Encode(fields, &block).ok()) ...;
//
//   sluice::http2::HpackDecoder decoder;
//   Status s = decoder.Decode(block_bytes, /*final=*/true,
//       [](std::string_view name, std::string_view value) { ... });
//
// Both are stateful: a connection has one of each, and header blocks must
// be encoded in the order their frames go on the wire and decoded in the
// order they arrived.
//
// Thread-safety: thread-compatible (the owner serializes calls).
#ifndef SLUICE_HTTP2_HPACK_H_
#define SLUICE_HTTP2_HPACK_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

struct nghttp2_hd_deflater;
struct nghttp2_hd_inflater;

namespace sluice::http2 {

// The allocator nghttp2's deflater/inflater use (hpack.cc): keeps a few freed blocks for reuse,
// so the steady state of encoding and decoding allocates nothing.
struct HpackMemory;

struct HeaderField {
  std::string_view name;
  std::string_view value;
  // Never put into the dynamic table (secrets such as authorization).
  bool never_index = false;
};

class HpackEncoder {
 public:
  // `max_table_size`: the largest dynamic table this encoder will use; the
  // peer's SETTINGS_HEADER_TABLE_SIZE can only lower it.
  explicit HpackEncoder(uint32_t max_table_size = 4096);
  ~HpackEncoder();
  HpackEncoder(const HpackEncoder&) = delete;
  HpackEncoder& operator=(const HpackEncoder&) = delete;

  // Appends the header block of `fields` to *out. INTERNAL if nghttp2
  // fails (out of memory); the encoder is unusable afterwards, so the
  // connection must end.
  //
  // A block without literals that are added to the dynamic table (indexed fields and literals
  // without indexing only) leaves the table as it was, so the same fields encode to the same
  // bytes until a block that changes it: those bytes are kept, and the same fields again (the
  // common case of a server's responses) are copied without nghttp2.
  [[nodiscard]] Status Encode(std::span<const HeaderField> fields, std::string* out);

  // The peer's SETTINGS_HEADER_TABLE_SIZE: the next block starts with a
  // table size update. INTERNAL on failure.
  [[nodiscard]] Status SetPeerTableSize(uint32_t size);

  // Blocks copied from the kept encoding (tests, benchmarks).
  uint64_t reused_blocks() const { return reused_blocks_; }

  // Tests: every later Encode fails, as an encode that ran out of memory leaves the encoder
  // unusable (a real failure may still let a head equal to the kept block be copied; the
  // writer encodes nothing more after any failure, so it never relies on either).
  void BreakForTesting();

 private:
  std::unique_ptr<HpackMemory> memory_;
  nghttp2_hd_deflater* deflater_ = nullptr;
  uint32_t max_table_size_;
  // The fields of the kept block (per field its lengths and never_index; their names and values
  // one after another in kept_bytes_), and its bytes; kept_block_ is empty when there is none.
  struct KeptField {
    uint32_t name_size;
    uint32_t value_size;
    bool never_index;
  };
  std::vector<KeptField> kept_shape_;
  std::string kept_bytes_;
  std::string kept_block_;
  uint64_t reused_blocks_ = 0;
};

class HpackDecoder {
 public:
  using FieldCallback = std::function<void(std::string_view name, std::string_view value)>;

  // `max_table_size`: our SETTINGS_HEADER_TABLE_SIZE. A dynamic table size
  // update above it is a COMPRESSION_ERROR (the HPACK table-size abuse).
  explicit HpackDecoder(uint32_t max_table_size = 4096);
  ~HpackDecoder();
  HpackDecoder(const HpackDecoder&) = delete;
  HpackDecoder& operator=(const HpackDecoder&) = delete;

  // Decodes one fragment of a header block (HEADERS, then CONTINUATIONs);
  // `final` marks the last (END_HEADERS). Calls `on_field` for each field,
  // in order; the views are valid during the call only. Fields may be split
  // across fragments: nghttp2 keeps the partial state (bounded by the
  // fragment sizes the connection allows). Returns INVALID_ARGUMENT for a
  // malformed block (the connection answers COMPRESSION_ERROR); the decoder
  // is then unusable.
  [[nodiscard]] Status Decode(std::span<const uint8_t> fragment, bool final,
                              const FieldCallback& on_field);

  //
  // A whole block (one fragment) that leaves the dynamic table as it was (no literal with
  // incremental indexing, no size update) is kept with its fields, and the same bytes again (a
  // client repeating its request headers) yield the same fields without nghttp2, until a block
  // that changes the table.
  // The same as Decode for a whole block (`final`, no fragment before it) with the kept block's
  // bytes, without the callbacks: true, and replayed() with it, when `fragment` is that block
  // (the caller knows its fields already); false, and nothing changed, otherwise (decode it).
  [[nodiscard]] bool Replay(std::span<const uint8_t> fragment, bool final);
  // Dynamic table size updates seen in blocks so far.
  uint64_t table_size_updates() const { return table_size_updates_; }
  // Blocks answered from the kept decoding (tests, benchmarks).
  uint64_t reused_blocks() const { return reused_blocks_; }
  // True from the start of a block answered from the kept decoding (so already during its
  // callbacks) until the next Decode: the fields are the ones the kept block gave before, in the
  // same order.
  bool replayed() const { return replayed_; }
  // A whole block is kept: the last Decode either kept the block it decoded or replayed it.
  bool holds_kept_block() const { return !kept_block_.empty(); }

 private:
  // Where the current block stands in its leading dynamic table size updates (RFC 7541 §4.2:
  // they may only open a block). nghttp2 does not report them, so Decode counts them from the
  // raw bytes, which may split one update's integer across fragments.
  enum class BlockPrefix : uint8_t { kOpcode, kSizeUpdateInteger, kPastPrefix };
  void CountTableSizeUpdates(std::span<const uint8_t> fragment);
  // `fragment` is a whole block with the kept block's bytes.
  bool IsKeptBlock(std::span<const uint8_t> fragment, bool final) const;

  Status DecodeWithNghttp2(std::span<const uint8_t> fragment, bool final,
                           const FieldCallback& on_field);

  std::unique_ptr<HpackMemory> memory_;
  nghttp2_hd_inflater* inflater_ = nullptr;
  uint64_t table_size_updates_ = 0;
  BlockPrefix prefix_ = BlockPrefix::kOpcode;
  bool in_block_ = false;  // a block's earlier fragments were decoded, not its last
  bool failed_ = false;
  // The kept block's bytes and fields (flat: per field name length, value length, name, value);
  // kept_block_ is empty when there is none.
  std::string kept_block_;
  std::string kept_fields_;
  uint64_t reused_blocks_ = 0;
  bool replayed_ = false;
};

}  // namespace sluice::http2

#endif  // SLUICE_HTTP2_HPACK_H_
