#include "http1/chunked_decoder.h"

#include <algorithm>

namespace sluice::http1 {

namespace {

// The value of a hex digit, or -1.
int HexValue(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

constexpr size_t kMaxSizeDigits = 16;  // 64 bits; more digits (leading zeros too) are refused

}  // namespace

ChunkedDecoder::ChunkedDecoder(ChunkedLimits limits) : limits_(limits) {}

void ChunkedDecoder::Reset() {
  state_ = State::kSize;
  chunk_size_ = 0;
  size_digits_ = 0;
  remaining_ = 0;
  body_bytes_ = 0;
  extension_bytes_ = 0;
  last_chunk_ = false;
  trailer_bytes_.clear();
  trailer_line_start_ = 0;
  trailer_lines_ = 0;
  trailers_.clear();
  error_code_ = 0;
  error_reason_ = {};
}

void ChunkedDecoder::Fail(uint16_t code, std::string_view reason) {
  state_ = State::kError;
  error_code_ = code;
  error_reason_ = reason;
  ++counters_.errors;
}

ChunkedOutcome ChunkedDecoder::Outcome(size_t consumed) const {
  ChunkedOutcome r;
  r.consumed = consumed;
  if (state_ == State::kDone) {
    r.status = ChunkedStatus::kDone;
  } else if (state_ == State::kError) {
    r.status = ChunkedStatus::kError;
    r.status_code = error_code_;
    r.reason = error_reason_;
  }
  return r;
}

ChunkedOutcome ChunkedDecoder::Decode(const BufferSequence& input, size_t offset,
                                      std::vector<std::span<const uint8_t>>* data,
                                      uint64_t max_data) {
  size_t consumed = 0;
  size_t chunk_start = 0;
  bool stop = state_ == State::kDone || state_ == State::kError;
  for (std::span<const uint8_t> chunk : input) {
    if (stop) break;
    const size_t chunk_end = chunk_start + chunk.size();
    if (chunk_end > offset) {
      const size_t skip = offset > chunk_start ? offset - chunk_start : 0;
      consumed += DecodePiece(chunk.data() + skip, chunk.size() - skip, data, &max_data, &stop);
    }
    chunk_start = chunk_end;
  }
  return Outcome(consumed);
}

ChunkedOutcome ChunkedDecoder::Decode(std::span<const uint8_t> input,
                                      std::vector<std::span<const uint8_t>>* data,
                                      uint64_t max_data) {
  bool stop = state_ == State::kDone || state_ == State::kError;
  const size_t consumed =
      stop ? 0 : DecodePiece(input.data(), input.size(), data, &max_data, &stop);
  return Outcome(consumed);
}

size_t ChunkedDecoder::DecodePiece(const uint8_t* p, size_t n,
                                   std::vector<std::span<const uint8_t>>* data, uint64_t* max_data,
                                   bool* stop) {
  size_t i = 0;
  // Each case either consumes p[i] (++i, continue) or ends the call (`break` out of the switch
  // after Fail or at the end of the body, with i bytes consumed).
  while (i < n) {
    const uint8_t c = p[i];
    switch (state_) {
      case State::kSize: {
        const int digit = HexValue(c);
        if (digit >= 0) {
          if (++size_digits_ > kMaxSizeDigits) {
            Fail(400, "chunk size too long");
            break;
          }
          chunk_size_ = (chunk_size_ << 4) | static_cast<uint64_t>(digit);
          ++i;
          continue;
        }
        if (size_digits_ == 0 || (c != ';' && c != ' ' && c != '\t' && c != '\r')) {
          Fail(400, "invalid chunk size");
          break;
        }
        // The size is complete: refuse an oversized body before any of it arrives.
        if (chunk_size_ > limits_.max_body_bytes - body_bytes_) {
          ++counters_.body_too_large;
          Fail(413, "body too large");
          break;
        }
        last_chunk_ = chunk_size_ == 0;
        if (c == '\r') {
          state_ = State::kSizeLf;
          ++i;
        } else {
          // ';' or BWS: extension bytes from here, handled by the states below.
          state_ = c == ';' ? State::kExtension : State::kSizeBws;
          if (!CountExtensionByte()) break;
          ++i;
        }
        continue;
      }
      case State::kSizeBws:
        if (c == ';') {
          state_ = State::kExtension;
        } else if (c != ' ' && c != '\t') {
          // Only BWS ";" may follow a size: "1 \r\n" and "1x" are refused.
          Fail(400, "invalid chunk size line");
          break;
        }
        if (!CountExtensionByte()) break;
        ++i;
        continue;
      case State::kExtension:
        if (c == '\r') {
          state_ = State::kSizeLf;
          ++i;
          continue;
        }
        if (!IsFieldValueChar(c)) {
          Fail(400, "invalid character in chunk extension");
          break;
        }
        if (!CountExtensionByte()) break;
        ++i;
        continue;
      case State::kSizeLf:
        if (c != '\n') {
          Fail(400, "bare CR in chunk size line");
          break;
        }
        ++i;
        if (last_chunk_) {
          state_ = State::kTrailerLine;
          trailer_line_start_ = trailer_bytes_.size();
        } else {
          state_ = State::kData;
          remaining_ = chunk_size_;
        }
        continue;
      case State::kData: {
        if (*max_data == 0) break;  // the caller's budget: stop before data it cannot take
        const uint64_t take = std::min<uint64_t>({remaining_, n - i, *max_data});
        data->emplace_back(p + i, static_cast<size_t>(take));
        i += static_cast<size_t>(take);
        remaining_ -= take;
        body_bytes_ += take;
        *max_data -= take;
        if (remaining_ == 0) state_ = State::kDataCr;
        continue;
      }
      case State::kDataCr:
        if (c != '\r') {
          Fail(400, "chunk data not followed by CRLF");
          break;
        }
        state_ = State::kDataLf;
        ++i;
        continue;
      case State::kDataLf:
        if (c != '\n') {
          Fail(400, "chunk data not followed by CRLF");
          break;
        }
        state_ = State::kSize;
        chunk_size_ = 0;
        size_digits_ = 0;
        ++i;
        continue;
      case State::kTrailerLine:
        if (c == '\n') {
          Fail(400, "bare LF line ending");
          break;
        }
        if (!AppendTrailerByte(c)) break;
        if (c == '\r') state_ = State::kTrailerLf;
        ++i;
        continue;
      case State::kTrailerLf:
        if (c != '\n') {
          Fail(400, "bare CR in trailer section");
          break;
        }
        if (!AppendTrailerByte(c)) break;
        ++i;
        if (trailer_bytes_.size() - trailer_line_start_ == 2) {
          FinishTrailers();  // the empty line ends the body: kDone or kError
          break;
        }
        if (++trailer_lines_ > limits_.max_trailer_count) {
          ++counters_.trailers_too_large;
          Fail(431, "too many trailer fields");
          break;
        }
        trailer_line_start_ = trailer_bytes_.size();
        state_ = State::kTrailerLine;
        continue;
      case State::kDone:
      case State::kError:
        break;
    }
    *stop = true;
    return i;
  }
  return i;
}

bool ChunkedDecoder::CountExtensionByte() {
  if (++extension_bytes_ <= limits_.max_chunk_extension_bytes) return true;
  ++counters_.extensions_too_long;
  Fail(400, "chunk extensions too long");
  return false;
}

bool ChunkedDecoder::AppendTrailerByte(uint8_t c) {
  if (trailer_bytes_.size() >= limits_.max_trailer_bytes) {
    ++counters_.trailers_too_large;
    Fail(431, "trailer section too large");
    return false;
  }
  trailer_bytes_.push_back(static_cast<char>(c));
  return true;
}

void ChunkedDecoder::FinishTrailers() {
  trailers_.clear();
  std::string_view rest(trailer_bytes_);
  rest.remove_suffix(2);  // the final empty line
  while (!rest.empty()) {
    const size_t crlf = rest.find("\r\n");
    Header h;
    const std::string_view reason = ParseFieldLine(rest.substr(0, crlf), &h);
    if (!reason.empty()) {
      Fail(400, reason);
      return;
    }
    trailers_.push_back(h);
    rest.remove_prefix(crlf + 2);
  }
  state_ = State::kDone;
}

}  // namespace sluice::http1
