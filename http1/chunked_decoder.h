// An incremental decoder for the chunked transfer coding (RFC 9112 §7.1) over pipe segments.
//
// The decoder is a byte-level state machine: it keeps its state between calls, so input may
// arrive in pieces of any size (one byte at a time included) and every byte handed to it is
// consumed, framing included. Body data is not copied: it comes back as spans of the input,
// which stay valid until the caller consumes (AdvanceTo) that input. Trailer fields are the one
// copy: they are collected (bounded by max_trailer_bytes) and parsed like header fields.
//
//   sluice::http1::ChunkedDecoder decoder;        // one per chunked request body
//   std::vector<std::span<const uint8_t>> data;
//   sluice::http1::ChunkedOutcome r = decoder.Decode(read.buffer, body_offset, &data);
//   for (std::span<const uint8_t> piece : data) { ... hand to the handler ... }
//   if (r.error()) { /* answer r.status_code, close */ }
//   AdvanceTo(body_offset + r.consumed);           // after the data has been used
//   if (r.done()) { ... decoder.trailers(); the next request starts here ... }
//
// Rejected (status codes for the response):
//   400  a chunk-size that is not hex, longer than 16 digits or overflowing 64 bits; whitespace
//        or junk after the size other than BWS before ';'; control characters in an extension;
//        a chunk not followed by CRLF; bare LF or bare CR in the framing; malformed trailer
//        fields (same rules as header fields, obs-fold included); extensions longer in total
//        than max_chunk_extension_bytes
//   413  a body larger than max_body_bytes (reported as soon as a chunk-size says so)
//   431  a trailer section larger than max_trailer_bytes or with more than max_trailer_count
//        fields
// Extensions are ignored: their bytes are checked (no CTL other than HTAB), not their grammar.
//
// Thread-safety: thread-compatible; one decoder per body, owned by the connection.
#ifndef SLUICE_HTTP1_CHUNKED_DECODER_H_
#define SLUICE_HTTP1_CHUNKED_DECODER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/pipe.h"
#include "http1/field.h"

namespace sluice::http1 {

// Decoder limits. Each violation has a counter in ChunkedDecoderCounters.
struct ChunkedLimits {
  // Most body bytes (the sum of chunk sizes). More: 413. Kestrel's default request body limit.
  uint64_t max_body_bytes = 30'000'000;
  // Most chunk-extension bytes (everything after a chunk-size up to its CR) in the whole body:
  // bounds the work a client can cause with 1-byte chunks carrying long extensions. More: 400.
  size_t max_chunk_extension_bytes = 16 * 1024;
  // Largest trailer section, field lines with their CRLFs. Larger: 431.
  size_t max_trailer_bytes = 32 * 1024;
  // Most trailer fields. More: 431.
  size_t max_trailer_count = 100;
};

enum class ChunkedStatus : uint8_t {
  // Everything given was consumed (or `max_data` was reached); call again with more input.
  kNeedMore,
  // The last chunk and the trailer section ended; `consumed` stops right after them.
  kDone,
  kError,
};

struct [[nodiscard]] ChunkedOutcome {
  ChunkedStatus status = ChunkedStatus::kNeedMore;
  // Bytes of the input (from the offset given) the decoder is finished with: framing and the
  // data it returned. The caller may AdvanceTo past them once it is done with that data.
  size_t consumed = 0;
  // kError: the status code to answer (400, 413 or 431), then close.
  uint16_t status_code = 0;
  // kError: a short static description for logs and tests.
  std::string_view reason = {};

  bool need_more() const { return status == ChunkedStatus::kNeedMore; }
  bool done() const { return status == ChunkedStatus::kDone; }
  bool error() const { return status == ChunkedStatus::kError; }
};

struct ChunkedDecoderCounters {
  uint64_t body_too_large = 0;       // 413 (max_body_bytes)
  uint64_t extensions_too_long = 0;  // 400 (max_chunk_extension_bytes)
  uint64_t trailers_too_large = 0;   // 431 (max_trailer_bytes, max_trailer_count)
  uint64_t errors = 0;               // every kError, including the ones above
};

class ChunkedDecoder {
 public:
  explicit ChunkedDecoder(ChunkedLimits limits = {});
  ChunkedDecoder(const ChunkedDecoder&) = delete;
  ChunkedDecoder& operator=(const ChunkedDecoder&) = delete;

  // Decodes `input` from `offset` on, appending the body data found to *data (spans of the
  // input, never empty). Returns kNeedMore after consuming everything given, or early when the
  // next byte is body data beyond `max_data` (the caller's budget for this call: `consumed` then
  // stops right before it, and the next call resumes there); kDone at the end of the body; or
  // kError. After kDone or kError, further calls return the same status and consume nothing.
  // Each call continues where the previous one stopped: pass the input that follows the bytes
  // already consumed.
  ChunkedOutcome Decode(const BufferSequence& input, size_t offset,
                        std::vector<std::span<const uint8_t>>* data,
                        uint64_t max_data = UINT64_MAX);
  // The same over contiguous bytes.
  ChunkedOutcome Decode(std::span<const uint8_t> input, std::vector<std::span<const uint8_t>>* data,
                        uint64_t max_data = UINT64_MAX);

  // After kDone: the trailer fields, as views into the decoder (valid until Reset or
  // destruction). Empty before.
  const std::vector<Header>& trailers() const { return trailers_; }
  // Body bytes returned so far.
  uint64_t body_bytes() const { return body_bytes_; }
  bool done() const { return state_ == State::kDone; }

  // Ready for the next body; keeps the counters and the trailer buffer's capacity.
  void Reset();

  const ChunkedLimits& limits() const { return limits_; }
  const ChunkedDecoderCounters& counters() const { return counters_; }

 private:
  enum class State : uint8_t {
    kSize,         // chunk-size hex digits (at least one)
    kSizeBws,      // BWS after the size: only more BWS or ';' may follow
    kExtension,    // after ';', up to the CR
    kSizeLf,       // after the size line's CR
    kData,         // chunk data, `remaining_` bytes left
    kDataCr,       // the CR after the data
    kDataLf,       // the LF after the data
    kTrailerLine,  // a trailer field line, or the final CR
    kTrailerLf,    // after a trailer line's CR
    kDone,
    kError,
  };

  // Decodes one contiguous piece. Returns bytes consumed; sets *stop at kDone, kError or when
  // `max_data` is exhausted.
  size_t DecodePiece(const uint8_t* p, size_t n, std::vector<std::span<const uint8_t>>* data,
                     uint64_t* max_data, bool* stop);
  void Fail(uint16_t code, std::string_view reason);
  // Counts one byte against max_chunk_extension_bytes; false (after Fail) past it.
  bool CountExtensionByte();
  // Appends one byte of the trailer section; false (after Fail) past max_trailer_bytes.
  bool AppendTrailerByte(uint8_t c);
  // Parses trailer_bytes_ into trailers_ at the end of the trailer section.
  void FinishTrailers();
  ChunkedOutcome Outcome(size_t consumed) const;

  const ChunkedLimits limits_;
  State state_ = State::kSize;
  uint64_t chunk_size_ = 0;  // being read (kSize)
  size_t size_digits_ = 0;   // hex digits read (kSize)
  uint64_t remaining_ = 0;   // data bytes left in the current chunk (kData)
  uint64_t body_bytes_ = 0;
  size_t extension_bytes_ = 0;  // over the whole body
  bool last_chunk_ = false;     // the size line being read is the last chunk's
  // The trailer section as received (field lines with CRLF), parsed at its end. A copy, because
  // a field line may span segments and trailers are rare and small.
  std::string trailer_bytes_;
  size_t trailer_line_start_ = 0;
  size_t trailer_lines_ = 0;
  std::vector<Header> trailers_;
  uint16_t error_code_ = 0;
  std::string_view error_reason_;
  ChunkedDecoderCounters counters_;
};

}  // namespace sluice::http1

#endif  // SLUICE_HTTP1_CHUNKED_DECODER_H_
