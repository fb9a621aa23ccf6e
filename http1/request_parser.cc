#include "http1/request_parser.h"

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

Method MethodFromToken(std::string_view m) {
  switch (m.size()) {
    case 3:
      if (m == "GET") return Method::kGet;
      if (m == "PUT") return Method::kPut;
      break;
    case 4:
      if (m == "HEAD") return Method::kHead;
      if (m == "POST") return Method::kPost;
      break;
    case 5:
      if (m == "PATCH") return Method::kPatch;
      if (m == "TRACE") return Method::kTrace;
      break;
    case 6:
      if (m == "DELETE") return Method::kDelete;
      break;
    case 7:
      if (m == "OPTIONS") return Method::kOptions;
      if (m == "CONNECT") return Method::kConnect;
      break;
    default:
      break;
  }
  return Method::kOther;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// reg-name and IP-literal characters (RFC 3986 §3.2.2): unreserved, sub-delims, '%'.
bool IsHostChar(char c) {
  return IsAlpha(c) || IsDigit(c) ||
         std::string_view("-._~!$&'()*+,;=%").find(c) != std::string_view::npos;
}

// uri-host [":" port] (RFC 9110 §7.2, RFC 3986 §3.2). With `for_connect` (authority-form, RFC
// 9112 §3.2.3) the host and the port must both be present. No userinfo.
bool IsValidAuthority(std::string_view s, bool for_connect) {
  size_t host_end = 0;
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    for (size_t i = 1; i < close; ++i) {
      if (!IsHostChar(s[i]) && s[i] != ':') return false;
    }
    host_end = close + 1;
  } else {
    while (host_end < s.size() && IsHostChar(s[host_end])) ++host_end;
  }
  std::string_view port;
  if (host_end < s.size()) {
    if (s[host_end] != ':') return false;
    port = s.substr(host_end + 1);
    for (char c : port) {
      if (!IsDigit(c)) return false;
    }
  }
  if (for_connect) return host_end > 0 && !port.empty();
  return true;
}

struct TargetParts {
  std::string_view path;
  std::string_view query;
  std::string_view authority;  // absolute-form and authority-form only
};

// Splits a request-target by its form (RFC 9112 §3.2). Returns "" or a static reason.
std::string_view SplitTarget(Method method, std::string_view target, TargetParts* parts) {
  if (method == Method::kConnect) {
    if (!IsValidAuthority(target, /*for_connect=*/true)) {
      return "CONNECT needs an authority-form target (host:port)";
    }
    parts->authority = target;
    return {};
  }
  if (target == "*") {
    if (method != Method::kOptions) return "asterisk-form target outside OPTIONS";
    parts->path = target;
    return {};
  }
  std::string_view rest = target;
  if (target[0] != '/') {
    // absolute-form: scheme "://" authority path-abempty [ "?" query ]
    size_t i = 0;
    if (!IsAlpha(target[0])) return "invalid request-target";
    while (i < target.size() && (IsAlpha(target[i]) || IsDigit(target[i]) || target[i] == '+' ||
                                 target[i] == '-' || target[i] == '.')) {
      ++i;
    }
    if (target.substr(i, 3) != "://") return "invalid request-target";
    rest = target.substr(i + 3);
    const size_t authority_end = rest.find_first_of("/?");
    const std::string_view authority = rest.substr(0, authority_end);
    if (authority.empty() || authority[0] == ':' ||
        !IsValidAuthority(authority, /*for_connect=*/false)) {
      return "invalid authority in absolute-form target";
    }
    parts->authority = authority;
    rest =
        authority_end == std::string_view::npos ? std::string_view() : rest.substr(authority_end);
  }
  const size_t question = rest.find('?');
  parts->path = rest.substr(0, question);
  if (question != std::string_view::npos) parts->query = rest.substr(question + 1);
  // An absolute-form target without a path means "/" (RFC 9112 §3.2.1); a static literal, so the
  // view outlives any input.
  if (parts->path.empty()) parts->path = "/";
  return {};
}

// 1*DIGIT into a uint64_t. False on an empty value, any other byte (a list such as "5, 6"
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

std::string_view RequestHead::Find(std::string_view name) const {
  for (const Header& h : headers) {
    if (EqualsIgnoreCase(h.name, name)) return h.value;
  }
  return {};
}

void RequestHead::Clear() {
  method = Method::kOther;
  method_text = target = path = query = host = {};
  version_minor = 1;
  headers.clear();
  framing = BodyFraming::kNone;
  content_length = 0;
  keep_alive = false;
  expect_continue = false;
}

RequestParser::RequestParser(ParseLimits limits) : limits_(limits) {}

ParseOutcome RequestParser::Parse(const BufferSequence& input, size_t offset, RequestHead* head) {
  return ParseChunks(input, offset, input.size(), head);
}

ParseOutcome RequestParser::Parse(std::string_view input, RequestHead* head) {
  const ContiguousInput chunks{{reinterpret_cast<const uint8_t*>(input.data()), input.size()}};
  return ParseChunks(chunks, 0, input.size(), head);
}

ParseOutcome RequestParser::Fail(uint16_t code, std::string_view reason) {
  ++counters_.errors;
  scan_ = ScanState();
  return ParseOutcome::Error(code, reason);
}

char* RequestParser::Scratch(size_t size) {
  if (scratch_size_ < size) {
    // Bounded by the limits: at most max_request_line + 2 + max_header_bytes.
    scratch_size_ = std::max(size, 2 * scratch_size_);
    scratch_.reset(new char[scratch_size_]);
  }
  return scratch_.get();
}

template <typename Chunks>
ParseOutcome RequestParser::ParseChunks(const Chunks& chunks, size_t offset, size_t size,
                                        RequestHead* head) {
  if (offset > size) return Fail(500, "offset past the end of the input");
  const size_t available = size - offset;
  // Input that cannot continue what was scanned before: start over (see Parse's contract).
  if (scan_.scanned > available) scan_ = ScanState();
  if (scan_.scanned == available) return ParseOutcome::Incomplete();

  size_t chunk_start = 0;  // relative to the start of `chunks`
  for (std::span<const uint8_t> chunk : chunks) {
    const size_t chunk_end = chunk_start + chunk.size();
    if (chunk_end > offset + scan_.scanned) {
      const size_t first = std::max(chunk_start, offset);
      const char* data = reinterpret_cast<const char*>(chunk.data()) + (first - chunk_start);
      ParseOutcome r = ScanChunk(chunks, offset, data, first - offset, chunk_end - first, head);
      if (!r.incomplete()) return r;
    }
    chunk_start = chunk_end;
  }

  // Limits that fire on an incomplete head. The scan's window already caught a line or section
  // that ran past its limit inside a chunk; these catch one that reaches it exactly at the end of
  // the input.
  const size_t pending = scan_.scanned - scan_.line_start;
  if (!scan_.in_headers && pending > limits_.max_request_line &&
      !(pending == limits_.max_request_line + 1 && scan_.last == '\r')) {
    ++counters_.request_line_too_long;
    return Fail(414, "request line too long");
  }
  if (scan_.in_headers && scan_.scanned - scan_.headers_start >= limits_.max_header_bytes) {
    ++counters_.header_bytes_too_large;
    return Fail(431, "header section too large");
  }
  return ParseOutcome::Incomplete();
}

template <typename Chunks>
ParseOutcome RequestParser::ScanChunk(const Chunks& chunks, size_t offset, const char* data,
                                      size_t chunk_first, size_t chunk_len, RequestHead* head) {
  const size_t chunk_end = chunk_first + chunk_len;
  ScanState& s = scan_;
  size_t pos = s.scanned;
  while (pos < chunk_end) {
    // A legitimate line ends before this: a request line of max_request_line bytes has its LF at
    // line_start + max_request_line + 1, and the header section's final LF is inside
    // max_header_bytes. Bounding memchr by it also bounds the work on a hostile stream.
    const size_t limit_end = s.in_headers ? s.headers_start + limits_.max_header_bytes
                                          : s.line_start + limits_.max_request_line + 2;
    const size_t window_end = std::min(chunk_end, limit_end);
    const void* lf = pos < window_end
                         ? std::memchr(data + (pos - chunk_first), '\n', window_end - pos)
                         : nullptr;
    if (lf == nullptr) {
      if (window_end < chunk_end) {
        if (s.in_headers) {
          ++counters_.header_bytes_too_large;
          return Fail(431, "header section too large");
        }
        ++counters_.request_line_too_long;
        return Fail(414, "request line too long");
      }
      pos = chunk_end;
      break;
    }
    const size_t lf_pos = chunk_first + static_cast<size_t>(static_cast<const char*>(lf) - data);
    // Strict line endings: every line ends in CRLF. A bare LF is accepted by some parsers and not
    // by others, which is what request smuggling feeds on, so it is rejected, not tolerated
    // (RFC 9112 §2.2 allows either).
    const char before = lf_pos > chunk_first ? data[lf_pos - 1 - chunk_first] : s.last;
    // Errors are reported in stream order: a request line of max_request_line + 1 bytes before a
    // bare LF was already too long (414) one byte before the LF arrived, as the incomplete check
    // in ParseChunks says when the input stops there.
    if (!s.in_headers && lf_pos - s.line_start == limits_.max_request_line + 1 && before != '\r') {
      ++counters_.request_line_too_long;
      return Fail(414, "request line too long");
    }
    if (lf_pos == s.line_start || before != '\r') return Fail(400, "bare LF line ending");
    const size_t line_len = lf_pos - 1 - s.line_start;  // without CRLF
    pos = lf_pos + 1;
    if (!s.in_headers) {
      if (line_len == 0) {
        if (++s.empty_lines > limits_.max_leading_empty_lines) {
          ++counters_.leading_empty_lines_too_many;
          return Fail(400, "too many empty lines before the request line");
        }
        s.line_start = s.request_line = pos;
        continue;
      }
      const char* line;
      if (s.line_start >= chunk_first) {
        line = data + (s.line_start - chunk_first);
      } else {
        // The request line started in an earlier chunk: copy it (at most max_request_line).
        char* copy = Scratch(line_len);
        chunks.CopyTo(offset + s.line_start, {reinterpret_cast<uint8_t*>(copy), line_len});
        line = copy;
      }
      ParseOutcome r = CheckRequestLine({line, line_len});
      if (!r.incomplete()) return r;
      s.in_headers = true;
      s.headers_start = s.line_start = pos;
      continue;
    }
    if (line_len == 0) {
      // The empty line: the head is [request_line, pos).
      const size_t size = pos - s.request_line;
      const char* bytes;
      if (s.request_line >= chunk_first) {
        bytes = data + (s.request_line - chunk_first);
      } else {
        // Spans chunks: linearize only the head (bounded by the limits) and parse the copy.
        ++counters_.linearized;
        char* copy = Scratch(size);
        chunks.CopyTo(offset + s.request_line, {reinterpret_cast<uint8_t*>(copy), size});
        bytes = copy;
      }
      return ParseHead(bytes, size, head);
    }
    if (++s.field_lines > limits_.max_header_count) {
      ++counters_.header_count_too_large;
      return Fail(431, "too many header fields");
    }
    s.line_start = pos;
  }
  s.scanned = pos;
  s.last = data[pos - 1 - chunk_first];
  return ParseOutcome::Incomplete();
}

ParseOutcome RequestParser::CheckRequestLine(std::string_view line) {
  // method SP request-target SP HTTP-version, single spaces (RFC 9112 §3).
  size_t method_len = 0;
  while (method_len < line.size() && IsTokenChar(static_cast<uint8_t>(line[method_len]))) {
    ++method_len;
  }
  if (method_len == 0 || method_len == line.size() || line[method_len] != ' ') {
    return Fail(400, "invalid method");
  }
  // The version is the last 8 bytes, after a space; the target is everything in between.
  constexpr size_t kVersionLen = 8;  // "HTTP/1.1"
  if (line.size() < method_len + 2 + 1 + kVersionLen ||
      line[line.size() - kVersionLen - 1] != ' ') {
    return Fail(400, "malformed request line");
  }
  const std::string_view target =
      line.substr(method_len + 1, line.size() - kVersionLen - 1 - (method_len + 1));
  if (FindInvalidTargetChar(target) != target.size()) {
    return Fail(400, "invalid character in request-target");
  }
  const std::string_view version = line.substr(line.size() - kVersionLen);
  if (version.substr(0, 5) != "HTTP/" || !IsDigit(version[5]) || version[6] != '.' ||
      !IsDigit(version[7])) {
    return Fail(400, "malformed HTTP version");
  }
  // Only 1.0 and 1.1. RFC 9110 §6.2 suggests treating a higher 1.x minor as 1.1; no client sends
  // one, and refusing what we do not implement is the simpler contract.
  if (version[5] != '1' || (version[7] != '0' && version[7] != '1')) {
    return Fail(505, "HTTP version not supported");
  }
  const Method method = MethodFromToken(line.substr(0, method_len));
  TargetParts parts;
  const std::string_view bad_target = SplitTarget(method, target, &parts);
  if (!bad_target.empty()) return Fail(400, bad_target);

  scan_.method = method;
  scan_.method_len = method_len;
  scan_.target_len = target.size();
  scan_.version_minor = static_cast<uint8_t>(version[7] - '0');
  return ParseOutcome::Incomplete();
}

ParseOutcome RequestParser::ParseHead(const char* bytes, size_t size, RequestHead* head) {
  const ScanState& s = scan_;
  head->Clear();
  head->method = s.method;
  head->method_text = {bytes, s.method_len};
  head->target = {bytes + s.method_len + 1, s.target_len};
  head->version_minor = s.version_minor;
  TargetParts parts;
  // Validated by CheckRequestLine on these very bytes.
  (void)SplitTarget(head->method, head->target, &parts);
  head->path = parts.path;
  head->query = parts.query;

  size_t host_lines = 0;
  std::string_view host;
  bool content_length_seen = false;
  bool transfer_encoding_seen = false;
  bool chunked_last = false;  // the last transfer coding seen so far is chunked
  bool chunked_seen = false;
  bool unknown_coding = false;
  bool connection_close = false;
  bool connection_keep_alive = false;
  bool bad_expect = false;

  // The field lines, between the request line and the final CRLF.
  size_t pos = s.headers_start - s.request_line;
  const size_t end = size - 2;
  while (pos < end) {
    // The scan saw every LF of [pos, size) preceded by a CR; the checks keep a broken Parse
    // contract (input that changed under a resumed scan) from reading out of bounds.
    const void* lf = std::memchr(bytes + pos, '\n', size - pos);
    if (lf == nullptr) return Fail(400, "malformed header section");
    const size_t lf_pos = static_cast<size_t>(static_cast<const char*>(lf) - bytes);
    if (lf_pos == pos || bytes[lf_pos - 1] != '\r') return Fail(400, "bare LF line ending");
    Header h;
    const std::string_view reason = ParseFieldLine({bytes + pos, lf_pos - 1 - pos}, &h);
    if (!reason.empty()) return Fail(400, reason);
    pos = lf_pos + 1;

    // The fields the parser acts on, told apart by length first.
    switch (h.name.size()) {
      case 4:
        if (EqualsIgnoreCase(h.name, "host")) {
          if (++host_lines > 1) return Fail(400, "multiple Host fields");
          if (!IsValidAuthority(h.value, /*for_connect=*/false)) {
            return Fail(400, "invalid Host");
          }
          host = h.value;
        }
        break;
      case 6:
        // HTTP/1.0 has no Expect: ignored there (RFC 9110 §10.1.1).
        if (s.version_minor == 1 && EqualsIgnoreCase(h.name, "expect")) {
          if (EqualsIgnoreCase(h.value, "100-continue")) {
            head->expect_continue = true;
          } else {
            bad_expect = true;
          }
        }
        break;
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
          // Any repetition is refused, even of the same value: simpler and safer than
          // comparing (RFC 9112 §6.3 allows either).
          if (content_length_seen) return Fail(400, "repeated Content-Length");
          if (!ParseContentLength(h.value, &head->content_length)) {
            return Fail(400, "invalid Content-Length");
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
              if (chunked_seen) return Fail(400, "chunked applied more than once");
              chunked_seen = chunked_last = true;
              continue;
            }
            if (chunked_seen) return Fail(400, "chunked is not the final transfer coding");
            if (!IsToken(TrimOws(coding.substr(0, coding.find(';'))))) {
              return Fail(400, "invalid transfer coding");
            }
            unknown_coding = true;
            chunked_last = false;
          }
          if (!any) return Fail(400, "empty Transfer-Encoding");
        }
        break;
      default:
        break;
    }
    head->headers.push_back(h);
  }

  // Framing (RFC 9112 §6.1, §6.3): the request smuggling defences.
  if (transfer_encoding_seen) {
    if (content_length_seen) return Fail(400, "Transfer-Encoding with Content-Length");
    if (s.version_minor == 0) return Fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (!chunked_last) return Fail(400, "chunked is not the final transfer coding");
    if (unknown_coding) return Fail(501, "unsupported transfer coding");
    head->framing = BodyFraming::kChunked;
  } else if (content_length_seen) {
    head->framing = BodyFraming::kContentLength;
  }
  if (s.version_minor == 1 && host_lines == 0) return Fail(400, "missing Host");
  if (bad_expect) return Fail(417, "unsupported expectation");

  head->host = head->method == Method::kConnect ? head->target
               : !parts.authority.empty()       ? parts.authority
                                                : host;
  head->keep_alive =
      s.version_minor == 1 ? !connection_close : connection_keep_alive && !connection_close;
  const size_t consumed = s.request_line + size;
  scan_ = ScanState();
  ++counters_.requests;
  return ParseOutcome::Complete(consumed);
}

}  // namespace sluice::http1
