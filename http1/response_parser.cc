#include "http1/response_parser.h"

#include <algorithm>
#include <cstring>
#include <span>

namespace sluice::http1 {

namespace {

// The contiguous overload's input, shaped like a BufferSequence (iteration and CopyTo) so one
// template serves both.
struct ContiguousInput {
  std::span<const uint8_t> bytes;
  const std::span<const uint8_t>* begin() const { return &bytes; }
  const std::span<const uint8_t>* end() const { return &bytes + (bytes.empty() ? 0 : 1); }
  size_t CopyTo(size_t offset, std::span<uint8_t> out) const {
    if (offset >= bytes.size()) return 0;
    const size_t n = std::min(out.size(), bytes.size() - offset);
    if (n > 0) std::memcpy(out.data(), bytes.data() + offset, n);
    return n;
  }
};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// 1*DIGIT into a uint64_t. False on an empty value, any other byte (a list such as "5, 5"
// included), or overflow.
bool ParseContentLength(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (!IsDigit(c)) return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

}  // namespace

std::string_view ResponseHead::Find(std::string_view name) const {
  for (const Header& h : headers) {
    if (EqualsIgnoreCase(h.name, name)) return h.value;
  }
  return {};
}

void ResponseHead::Clear() {
  version_minor = 1;
  status_code = 0;
  reason = {};
  headers.clear();
  framing = ResponseFraming::kNone;
  content_length = 0;
  keep_alive = false;
}

ResponseParser::ResponseParser(ResponseParseLimits limits) : limits_(limits) {}

ResponseParseOutcome ResponseParser::Parse(const BufferSequence& input, size_t offset,
                                           bool head_request, ResponseHead* head) {
  return ParseChunks(input, offset, input.size(), head_request, head);
}

ResponseParseOutcome ResponseParser::Parse(std::string_view input, bool head_request,
                                           ResponseHead* head) {
  const ContiguousInput chunks{{reinterpret_cast<const uint8_t*>(input.data()), input.size()}};
  return ParseChunks(chunks, 0, input.size(), head_request, head);
}

ResponseParseOutcome ResponseParser::Fail(StatusCode code, std::string_view reason) {
  ++counters_.errors;
  scan_ = ScanState();
  ResponseParseOutcome r;
  r.status = ResponseParseStatus::kError;
  r.error_code = code;
  r.reason = reason;
  return r;
}

ResponseParseOutcome ResponseParser::LimitExceeded(uint64_t* counter, std::string_view reason) {
  ++*counter;
  return Fail(StatusCode::kResourceExhausted, reason);
}

char* ResponseParser::Scratch(size_t size) {
  if (scratch_size_ < size) {
    // Bounded by the limits: at most max_status_line + 2 + max_header_bytes.
    scratch_size_ = std::max(size, 2 * scratch_size_);
    scratch_.reset(new char[scratch_size_]);
  }
  return scratch_.get();
}

template <typename Chunks>
ResponseParseOutcome ResponseParser::ParseChunks(const Chunks& chunks, size_t offset, size_t size,
                                                 bool head_request, ResponseHead* head) {
  if (offset > size) return Fail(StatusCode::kInvalidArgument, "offset past the end of the input");
  const size_t available = size - offset;
  // Input that cannot continue what was scanned before: start over (see Parse's contract).
  if (scan_.scanned > available) scan_ = ScanState();
  if (scan_.scanned == available) return ResponseParseOutcome();

  size_t chunk_start = 0;  // relative to the start of `chunks`
  for (std::span<const uint8_t> chunk : chunks) {
    const size_t chunk_end = chunk_start + chunk.size();
    if (chunk_end > offset + scan_.scanned) {
      const size_t first = std::max(chunk_start, offset);
      const char* data = reinterpret_cast<const char*>(chunk.data()) + (first - chunk_start);
      ResponseParseOutcome r =
          ScanChunk(chunks, offset, data, first - offset, chunk_end - first, head_request, head);
      if (!r.incomplete()) return r;
    }
    chunk_start = chunk_end;
  }

  // Limits that fire on an incomplete head. The scan's window already caught a line or section
  // that ran past its limit inside a chunk; these catch one that reaches it exactly at the end of
  // the input.
  const size_t pending = scan_.scanned - scan_.line_start;
  if (!scan_.in_headers && pending > limits_.max_status_line &&
      !(pending == limits_.max_status_line + 1 && scan_.last == '\r')) {
    return LimitExceeded(&counters_.status_line_too_long, "status line too long");
  }
  if (scan_.in_headers && scan_.scanned - scan_.headers_start >= limits_.max_header_bytes) {
    return LimitExceeded(&counters_.header_bytes_too_large, "header section too large");
  }
  return ResponseParseOutcome();
}

template <typename Chunks>
ResponseParseOutcome ResponseParser::ScanChunk(const Chunks& chunks, size_t offset,
                                               const char* data, size_t chunk_first,
                                               size_t chunk_len, bool head_request,
                                               ResponseHead* head) {
  const size_t chunk_end = chunk_first + chunk_len;
  ScanState& s = scan_;
  size_t pos = s.scanned;
  while (pos < chunk_end) {
    // A legitimate line ends before this: a status line of max_status_line bytes has its LF at
    // line_start + max_status_line + 1, and the header section's final LF is inside
    // max_header_bytes. Bounding memchr by it also bounds the work on a hostile stream.
    const size_t limit_end = s.in_headers ? s.headers_start + limits_.max_header_bytes
                                          : s.line_start + limits_.max_status_line + 2;
    const size_t window_end = std::min(chunk_end, limit_end);
    const void* lf = pos < window_end
                         ? std::memchr(data + (pos - chunk_first), '\n', window_end - pos)
                         : nullptr;
    if (lf == nullptr) {
      if (window_end < chunk_end) {
        if (s.in_headers) {
          return LimitExceeded(&counters_.header_bytes_too_large, "header section too large");
        }
        return LimitExceeded(&counters_.status_line_too_long, "status line too long");
      }
      pos = chunk_end;
      break;
    }
    const size_t lf_pos = chunk_first + static_cast<size_t>(static_cast<const char*>(lf) - data);
    // Strict line endings, as in the request parser: a bare LF is where parsers disagree.
    const char before = lf_pos > chunk_first ? data[lf_pos - 1 - chunk_first] : s.last;
    // Errors in stream order: a status line of max_status_line + 1 bytes before a bare LF was
    // already too long one byte before the LF arrived.
    if (!s.in_headers && lf_pos - s.line_start == limits_.max_status_line + 1 && before != '\r') {
      return LimitExceeded(&counters_.status_line_too_long, "status line too long");
    }
    if (lf_pos == s.line_start || before != '\r') {
      return Fail(StatusCode::kInvalidArgument, "bare LF line ending");
    }
    const size_t line_len = lf_pos - 1 - s.line_start;  // without CRLF
    pos = lf_pos + 1;
    if (!s.in_headers) {
      if (line_len == 0) return Fail(StatusCode::kInvalidArgument, "empty line before status line");
      const char* line;
      if (s.line_start >= chunk_first) {
        line = data + (s.line_start - chunk_first);
      } else {
        // The status line started in an earlier chunk: copy it (at most max_status_line).
        char* copy = Scratch(line_len);
        chunks.CopyTo(offset + s.line_start, {reinterpret_cast<uint8_t*>(copy), line_len});
        line = copy;
      }
      ResponseParseOutcome r = CheckStatusLine({line, line_len});
      if (!r.incomplete()) return r;
      s.in_headers = true;
      s.headers_start = s.line_start = pos;
      continue;
    }
    if (line_len == 0) {
      // The empty line: the head is [head_start, pos).
      const size_t size = pos - s.head_start;
      const char* bytes;
      if (s.head_start >= chunk_first) {
        bytes = data + (s.head_start - chunk_first);
      } else {
        // Spans chunks: linearize only the head (bounded by the limits) and parse the copy.
        ++counters_.linearized;
        char* copy = Scratch(size);
        chunks.CopyTo(offset + s.head_start, {reinterpret_cast<uint8_t*>(copy), size});
        bytes = copy;
      }
      ResponseParseOutcome r = ParseHead(bytes, size, head_request, head);
      if (r.error()) return r;
      const bool interim = s.status_code < 200 && s.status_code != 101;
      if (!interim) {
        r.consumed = pos;
        r.interim_responses = s.interim;
        ++counters_.responses;
        scan_ = ScanState();
        return r;
      }
      // A 1xx: skip it and look for the next head right after.
      ++counters_.interim_responses;
      if (++s.interim > limits_.max_interim_responses) {
        return LimitExceeded(&counters_.interim_responses_too_many, "too many 1xx responses");
      }
      head->Clear();
      s.head_start = s.line_start = pos;
      s.headers_start = 0;
      s.field_lines = 0;
      s.in_headers = false;
      continue;
    }
    if (++s.field_lines > limits_.max_header_count) {
      return LimitExceeded(&counters_.header_count_too_large, "too many header fields");
    }
    s.line_start = pos;
  }
  s.scanned = pos;
  s.last = data[pos - 1 - chunk_first];
  return ResponseParseOutcome();
}

ResponseParseOutcome ResponseParser::CheckStatusLine(std::string_view line) {
  // HTTP-version SP 3DIGIT [SP reason-phrase] (RFC 9112 §4).
  if (line.size() < 12 || line.substr(0, 5) != "HTTP/" || !IsDigit(line[5]) || line[6] != '.' ||
      !IsDigit(line[7]) || line[8] != ' ') {
    return Fail(StatusCode::kInvalidArgument, "malformed status line");
  }
  if (line[5] != '1' || (line[7] != '0' && line[7] != '1')) {
    return Fail(StatusCode::kInvalidArgument, "HTTP version not supported");
  }
  if (!IsDigit(line[9]) || !IsDigit(line[10]) || !IsDigit(line[11])) {
    return Fail(StatusCode::kInvalidArgument, "malformed status code");
  }
  const int code = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
  if (code < 100 || code > 599) return Fail(StatusCode::kInvalidArgument, "invalid status code");
  if (line.size() > 12) {
    if (line[12] != ' ') return Fail(StatusCode::kInvalidArgument, "malformed status line");
    const std::string_view reason = line.substr(13);
    if (FindInvalidFieldValueChar(reason) != reason.size()) {
      return Fail(StatusCode::kInvalidArgument, "invalid character in reason phrase");
    }
  }
  scan_.status_code = static_cast<uint16_t>(code);
  scan_.version_minor = static_cast<uint8_t>(line[7] - '0');
  return ResponseParseOutcome();
}

ResponseParseOutcome ResponseParser::ParseHead(const char* bytes, size_t size, bool head_request,
                                               ResponseHead* head) {
  const ScanState& s = scan_;
  head->Clear();
  head->status_code = s.status_code;
  head->version_minor = s.version_minor;
  const size_t status_line_len = s.headers_start - s.head_start - 2;
  head->reason = status_line_len > 13 ? std::string_view(bytes + 13, status_line_len - 13)
                                      : std::string_view();

  bool content_length_seen = false;
  bool transfer_encoding_seen = false;
  bool chunked_last = false;  // the last transfer coding seen so far is chunked
  bool chunked_seen = false;
  bool connection_close = false;
  bool connection_keep_alive = false;

  // The field lines, between the status line and the final CRLF.
  size_t pos = s.headers_start - s.head_start;
  const size_t end = size - 2;
  while (pos < end) {
    // The scan saw every LF of [pos, size) preceded by a CR; the checks keep a broken Parse
    // contract (input that changed under a resumed scan) from reading out of bounds.
    const void* lf = std::memchr(bytes + pos, '\n', size - pos);
    if (lf == nullptr) return Fail(StatusCode::kInvalidArgument, "malformed header section");
    const size_t lf_pos = static_cast<size_t>(static_cast<const char*>(lf) - bytes);
    if (lf_pos == pos || bytes[lf_pos - 1] != '\r') {
      return Fail(StatusCode::kInvalidArgument, "bare LF line ending");
    }
    Header h;
    const std::string_view bad = ParseFieldLine({bytes + pos, lf_pos - 1 - pos}, &h);
    if (!bad.empty()) return Fail(StatusCode::kInvalidArgument, bad);
    pos = lf_pos + 1;

    // The fields the parser acts on, told apart by length first.
    switch (h.name.size()) {
      case 10:
        if (EqualsIgnoreCase(h.name, "connection")) {
          std::string_view list = h.value;
          while (!list.empty()) {
            const std::string_view option = NextListElement(&list);
            if (EqualsIgnoreCase(option, "close")) connection_close = true;
            if (EqualsIgnoreCase(option, "keep-alive")) connection_keep_alive = true;
          }
        }
        break;
      case 14:
        if (EqualsIgnoreCase(h.name, "content-length")) {
          // Any repetition is refused, even of the same value, as in the request parser.
          if (content_length_seen) {
            return Fail(StatusCode::kInvalidArgument, "repeated Content-Length");
          }
          if (!ParseContentLength(h.value, &head->content_length)) {
            return Fail(StatusCode::kInvalidArgument, "invalid Content-Length");
          }
          content_length_seen = true;
        }
        break;
      case 17:
        if (EqualsIgnoreCase(h.name, "transfer-encoding")) {
          transfer_encoding_seen = true;
          std::string_view list = h.value;
          bool any = false;
          while (!list.empty()) {
            const std::string_view coding = NextListElement(&list);
            if (coding.empty()) continue;  // empty list elements do not count (RFC 9110 §5.6.1)
            any = true;
            if (EqualsIgnoreCase(coding, "chunked")) {
              if (chunked_seen) {
                return Fail(StatusCode::kInvalidArgument, "chunked applied more than once");
              }
              chunked_seen = chunked_last = true;
              continue;
            }
            if (!IsToken(TrimOws(coding.substr(0, coding.find(';'))))) {
              return Fail(StatusCode::kInvalidArgument, "invalid transfer coding");
            }
            chunked_last = false;
          }
          if (!any) return Fail(StatusCode::kInvalidArgument, "empty Transfer-Encoding");
        }
        break;
      default:
        break;
    }
    head->headers.push_back(h);
  }

  // Framing (RFC 9112 §6.1, §6.3). The conflicts are refused whatever the status: a response
  // carrying both lengths is a response-splitting attempt or a broken server.
  if (transfer_encoding_seen) {
    if (content_length_seen) {
      return Fail(StatusCode::kInvalidArgument, "Transfer-Encoding with Content-Length");
    }
    if (s.version_minor == 0) {
      return Fail(StatusCode::kInvalidArgument, "Transfer-Encoding in an HTTP/1.0 response");
    }
  }
  const uint16_t code = s.status_code;
  if (head_request || code < 200 || code == 204 || code == 304) {
    head->framing = ResponseFraming::kNone;
    head->content_length = 0;
  } else if (transfer_encoding_seen) {
    head->framing = chunked_last ? ResponseFraming::kChunked : ResponseFraming::kUntilClose;
  } else if (content_length_seen) {
    head->framing = ResponseFraming::kContentLength;
  } else {
    head->framing = ResponseFraming::kUntilClose;
  }
  head->keep_alive =
      s.version_minor == 1 ? !connection_close : connection_keep_alive && !connection_close;
  if (head->framing == ResponseFraming::kUntilClose || code == 101) head->keep_alive = false;

  ResponseParseOutcome r;
  r.status = ResponseParseStatus::kComplete;
  return r;
}

}  // namespace sluice::http1
