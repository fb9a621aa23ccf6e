#include "http1/request_parser.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "core/ascii.h"
#include "core/bytes.h"

namespace sluice::http1 {

namespace {

// Whether the N - 1 bytes at `p` are the literal `s` (N - 1 characters and its NUL): a loop of
// constant length, unrolled inline (a string_view == calls memcmp).
template <size_t N>
bool Is(const char* p, const char (&s)[N]) {
  for (size_t i = 0; i + 1 < N; ++i) {
    if (p[i] != s[i]) return false;
  }
  return true;
}

Method MethodFromToken(std::string_view m) {
  const char* p = m.data();
  switch (m.size()) {
    case 3:
      if (Is(p, "GET")) return Method::kGet;
      if (Is(p, "PUT")) return Method::kPut;
      break;
    case 4:
      if (Is(p, "HEAD")) return Method::kHead;
      if (Is(p, "POST")) return Method::kPost;
      break;
    case 5:
      if (Is(p, "PATCH")) return Method::kPatch;
      if (Is(p, "TRACE")) return Method::kTrace;
      break;
    case 6:
      if (Is(p, "DELETE")) return Method::kDelete;
      break;
    case 7:
      if (Is(p, "OPTIONS")) return Method::kOptions;
      if (Is(p, "CONNECT")) return Method::kConnect;
      break;
    default:
      break;
  }
  return Method::kOther;
}

constexpr bool IsDigit(char c) { return c >= '0' && c <= '9'; }
constexpr bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// reg-name and IP-literal characters (RFC 3986 §3.2.2): unreserved, sub-delims, '%'. A table: a
// Host new to the connection, and every authority in a target, goes through it byte by byte.
inline constexpr std::array<bool, 256> kHostChar = [] {
  std::array<bool, 256> table{};
  for (int c = 0; c < 256; ++c) {
    const char ch = static_cast<char>(c);
    table[static_cast<size_t>(c)] =
        IsAlpha(ch) || IsDigit(ch) ||
        std::string_view("-._~!$&'()*+,;=%").find(ch) != std::string_view::npos;
  }
  return table;
}();

bool IsHostChar(char c) { return kHostChar[static_cast<uint8_t>(c)]; }

// Whether a 4-byte field name is "host" in any case, in one word compare: setting bit 5 of a
// byte makes it a given lowercase letter only if it was that letter in either case.
bool IsHostName(std::string_view name) {
  uint32_t w;
  std::memcpy(&w, name.data(), sizeof(w));
  uint32_t host;
  std::memcpy(&host, "host", sizeof(host));
  return (w | 0x20202020u) == host;
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

// Splits a request-target by its form (RFC 9112 §3.2); `question_mark` is the index of its first
// '?' (target.size() if none), found as it was validated. Returns "" or a static reason.
std::string_view SplitTarget(Method method, std::string_view target, size_t question_mark,
                             TargetParts* parts) {
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
  // As http::SplitPathAndQuery(rest): no '?' comes before the authority's end, so the target's
  // first is rest's.
  if (question_mark == target.size()) {
    parts->path = rest;
  } else {
    const size_t rest_start = static_cast<size_t>(rest.data() - target.data());
    parts->path = target.substr(rest_start, question_mark - rest_start);
    parts->query = target.substr(question_mark + 1);
  }
  // An absolute-form target without a path means "/" (RFC 9112 §3.2.1); left empty here for the
  // caller to tell from a path in the line.
  return {};
}

}  // namespace

std::string_view RequestHead::Find(std::string_view name) const { return FindField(headers, name); }

void RequestHead::Clear() {
  bytes = {};
  method = Method::kOther;
  method_text = target = path = query = host = {};
  version_minor = 1;
  headers.clear();
  framing = BodyFraming::kNone;
  content_length = 0;
  keep_alive = false;
  expect_continue = false;
}

struct RequestParser::RequestLine {
  using Outcome = ParseOutcome;

  Outcome Fail(HeadFault fault) { return parser->Fail(fault); }
  Outcome CheckStartLine(std::string_view line) { return parser->CheckRequestLine(line); }
  Outcome Head(const ScannedHead& scanned) { return parser->ParseHead(scanned, head); }

  RequestParser* parser;
  RequestHead* head;
};

RequestParser::RequestParser(ParseLimits limits)
    : limits_(limits),
      scanner_(HeadScanLimits{.max_start_line = limits.max_request_line,
                              .max_header_bytes = limits.max_header_bytes,
                              .max_header_count = limits.max_header_count,
                              .max_leading_empty_lines = limits.max_leading_empty_lines}) {}

ParseOutcome RequestParser::Scan(const BufferSequence& input, size_t offset, RequestHead* head) {
  RequestLine line{this, head};
  return scanner_.Scan(input, offset, input.size(), line);
}

ParseOutcome RequestParser::Parse(std::string_view input, RequestHead* head) {
  if (!scanner_.resuming() && !input.empty()) {
    const size_t consumed = ParseInPlace(input.data(), input.size(), head);
    if (consumed != 0) return ParseOutcome::Complete(consumed);
  }
  RequestLine line{this, head};
  return scanner_.Scan(ContiguousInput(input), 0, input.size(), line);
}

ParseOutcome RequestParser::Fail(uint16_t code, std::string_view reason) {
  ++counters_.errors;
  return ParseOutcome::Error(code, reason);
}

ParseOutcome RequestParser::Fail(HeadFault fault) {
  switch (fault) {
    case HeadFault::kOffsetPastEnd:
      return Fail(500, "offset past the end of the input");
    case HeadFault::kStartLineTooLong:
      ++counters_.request_line_too_long;
      return Fail(414, "request line too long");
    case HeadFault::kHeaderSectionTooLarge:
      ++counters_.header_bytes_too_large;
      return Fail(431, "header section too large");
    case HeadFault::kTooManyFields:
      ++counters_.header_count_too_large;
      return Fail(431, "too many header fields");
    case HeadFault::kTooManyEmptyLines:
      ++counters_.leading_empty_lines_too_many;
      return Fail(400, "too many empty lines before the request line");
    case HeadFault::kBareLf:
      break;
  }
  return Fail(400, "bare LF line ending");
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
  size_t question_mark = 0;
  if (FindInvalidTargetChar(target, &question_mark) != target.size()) {
    return Fail(400, "invalid character in request-target");
  }
  const std::string_view version = line.substr(line.size() - kVersionLen);
  // The two versions served, each compared as one 8-byte word; anything else is told apart below.
  const uint64_t version_word = LoadWord<uint64_t>(version.data());
  if (version_word != LoadWord<uint64_t>("HTTP/1.1") &&
      version_word != LoadWord<uint64_t>("HTTP/1.0")) {
    if (version.substr(0, 5) != "HTTP/" || !IsDigit(version[5]) || version[6] != '.' ||
        !IsDigit(version[7])) {
      return Fail(400, "malformed HTTP version");
    }
    // Only 1.0 and 1.1. RFC 9110 §6.2 suggests treating a higher 1.x minor as 1.1; no client
    // sends one, and refusing what we do not implement is the simpler contract.
    return Fail(505, "HTTP version not supported");
  }
  const ParseOutcome r = RecordRequestLine(line, method_len, target, question_mark,
                                           static_cast<uint8_t>(version[7] - '0'));
  if (r.error()) ++counters_.errors;
  return r;
}

ParseOutcome RequestParser::RecordRequestLine(std::string_view line, size_t method_len,
                                              std::string_view target, size_t question_mark,
                                              uint8_t version_minor) {
  const Method method = MethodFromToken(line.substr(0, method_len));
  TargetParts parts;
  const std::string_view bad_target = SplitTarget(method, target, question_mark, &parts);
  if (!bad_target.empty()) return ParseOutcome::Error(400, bad_target);

  // Kept as offsets, so that ParseFields finds the parts without splitting the target again.
  const auto offset_of = [line](std::string_view part) {
    return LinePart{part.empty() ? 0 : static_cast<size_t>(part.data() - line.data()), part.size()};
  };
  line_.method = method;
  line_.method_len = method_len;
  line_.target_len = target.size();
  line_.path = offset_of(parts.path);
  line_.query = offset_of(parts.query);
  line_.authority = offset_of(parts.authority);
  line_.root_path = parts.path.empty() && method != Method::kConnect;
  line_.version_minor = version_minor;
  return ParseOutcome::Incomplete();
}

size_t RequestParser::ParseInPlace(const char* data, size_t size, RequestHead* head) {
  // A head the scanner accepts is at most this long; looking no further bounds the work spent on
  // input that is not one before the scanner refuses it.
  const size_t max_head = limits_.max_request_line + 2 + limits_.max_header_bytes;
  if (size > max_head) size = max_head;
  // method SP request-target SP HTTP-version CRLF, split by the syntax of each part: the method
  // ends at its first byte that is not a token character, the target at its first byte that is
  // not a target character (SP is not one), and the version is exactly HTTP/1.1 or HTTP/1.0. A
  // line split so has no CR or LF before its CRLF, so it is the line the scanner would find, and
  // CheckRequestLine would split it the same way.
  size_t method_len = 0;
  // The method of nearly every request, in one compare.
  const bool get = size >= 4 && LoadWord<uint32_t>(data) == LoadWord<uint32_t>("GET ");
  if (get) {
    method_len = 3;
  } else {
    while (method_len < size && IsTokenChar(static_cast<uint8_t>(data[method_len]))) ++method_len;
    if (method_len == 0 || method_len == size || data[method_len] != ' ') return 0;
  }
  const size_t target_start = method_len + 1;
  size_t question_mark = 0;
  const size_t target_len = FindInvalidTargetChar(
      {data + target_start, std::min(size - target_start, limits_.max_request_line)},
      &question_mark);
  constexpr size_t kVersionLen = 8;  // "HTTP/1.1"
  const size_t version = target_start + target_len + 1;
  if (target_len == 0 || size < version + kVersionLen + 2 || data[version - 1] != ' ' ||
      data[version + kVersionLen] != '\r' || data[version + kVersionLen + 1] != '\n') {
    return 0;
  }
  const uint64_t version_word = LoadWord<uint64_t>(data + version);
  uint8_t version_minor;
  if (version_word == LoadWord<uint64_t>("HTTP/1.1")) {
    version_minor = 1;
  } else if (version_word == LoadWord<uint64_t>("HTTP/1.0")) {
    version_minor = 0;
  } else {
    return 0;
  }
  const size_t line_size = version + kVersionLen;
  if (line_size > limits_.max_request_line) return 0;
  // The scan found no '?' in the target: the first is past it, or there is none.
  if (question_mark > target_len) question_mark = target_len;
  const Method method = get ? Method::kGet : MethodFromToken({data, method_len});
  if (data[target_start] == '/' && method != Method::kConnect) {
    // origin-form, as SplitTarget and RecordRequestLine take it: the path up to the first '?',
    // the query after it.
    line_.method = method;
    line_.method_len = method_len;
    line_.target_len = target_len;
    line_.path = {target_start, question_mark};
    line_.query = question_mark + 1 >= target_len
                      ? LinePart{}
                      : LinePart{target_start + question_mark + 1, target_len - question_mark - 1};
    line_.authority = {};
    line_.root_path = false;
    line_.version_minor = version_minor;
  } else if (RecordRequestLine({data, line_size}, method_len, {data + target_start, target_len},
                               question_mark, version_minor)
                 .error()) {
    return 0;
  }
  const size_t fields_start = line_size + 2;
  const ParseOutcome r = ParseFields(data, size, fields_start, head);
  if (!r.complete() || r.consumed - fields_start > limits_.max_header_bytes ||
      head->headers.size() > limits_.max_header_count) {
    return 0;
  }
  ++counters_.requests;
  return r.consumed;
}

ParseOutcome RequestParser::ParseHead(const ScannedHead& scanned, RequestHead* head) {
  if (scanned.linearized) ++counters_.linearized;
  const ParseOutcome r =
      ParseFields(scanned.bytes, scanned.size, scanned.start_line_size + 2, head);
  if (r.error()) {
    ++counters_.errors;
    return r;
  }
  // The scan ended the head at its first empty line, where parsing its field lines ends too.
  if (r.consumed != scanned.size) return Fail(400, "malformed header section");
  ++counters_.requests;
  return ParseOutcome::Complete(scanned.end);
}

ParseOutcome RequestParser::ParseFields(const char* bytes, size_t size, size_t fields_start,
                                        RequestHead* head) {
  const LineParts& l = line_;
  // Every member is set below (RequestHead::Clear, without storing most of them twice).
  head->bytes = {};
  head->headers.clear();
  head->framing = BodyFraming::kNone;
  head->content_length = 0;
  head->expect_continue = false;
  head->keep_alive = false;
  head->host = {};
  head->method = l.method;
  head->method_text = {bytes, l.method_len};
  head->target = {bytes + l.method_len + 1, l.target_len};
  head->version_minor = l.version_minor;
  // Split by CheckRequestLine: the same bytes, here in place or in scratch.
  const auto part = [bytes](LinePart p) { return std::string_view(bytes + p.offset, p.size); };
  // A static literal, so the view outlives any input.
  head->path = l.root_path ? std::string_view("/") : part(l.path);
  head->query = part(l.query);
  const std::string_view authority = part(l.authority);

  size_t host_lines = 0;
  std::string_view host;
  bool bad_expect = false;
  FramingFields framing(FramingFields::CodingAfterChunked::kRefused);
  size_t end = fields_start;
  const std::string_view bad_field = ParseFieldSection(
      bytes, size, &end, &framing, &head->headers, [&](const Header& h) -> std::string_view {
        // The fields only a request has, told apart by length first.
        switch (h.name.size()) {
          case 4:
            if (IsHostName(h.name)) {
              if (++host_lines > 1) return "multiple Host fields";
              if (!BytesEqual(h.value, valid_host_)) {
                if (!IsValidAuthority(h.value, /*for_connect=*/false)) return "invalid Host";
                if (h.value.size() <= kMaxRememberedHost) valid_host_.assign(h.value);
              }
              host = h.value;
            }
            break;
          case 6:
            // HTTP/1.0 has no Expect: ignored there (RFC 9110 §10.1.1).
            if (l.version_minor == 1 && EqualsLowercase(h.name, "expect")) {
              if (EqualsLowercase(h.value, "100-continue")) {
                head->expect_continue = true;
              } else {
                bad_expect = true;
              }
            }
            break;
          default:
            break;
        }
        return {};
      });
  if (!bad_field.empty()) return ParseOutcome::Error(400, bad_field);
  head->bytes = {bytes, end};

  // Framing (RFC 9112 §6.1, §6.3): the request smuggling defences.
  const std::string_view conflict =
      framing.Conflict(l.version_minor, "Transfer-Encoding in an HTTP/1.0 request");
  if (!conflict.empty()) return ParseOutcome::Error(400, conflict);
  if (framing.transfer_encoding_seen()) {
    if (!framing.chunked_last()) {
      return ParseOutcome::Error(400, "chunked is not the final transfer coding");
    }
    if (framing.other_coding()) return ParseOutcome::Error(501, "unsupported transfer coding");
    head->framing = BodyFraming::kChunked;
  } else if (framing.content_length_seen()) {
    head->framing = BodyFraming::kContentLength;
    head->content_length = framing.content_length();
  }
  if (l.version_minor == 1 && host_lines == 0) return ParseOutcome::Error(400, "missing Host");
  if (bad_expect) return ParseOutcome::Error(417, "unsupported expectation");

  head->host = head->method == Method::kConnect ? head->target
               : !authority.empty()             ? authority
                                                : host;
  head->keep_alive = framing.KeepAlive(l.version_minor);
  return ParseOutcome::Complete(end);
}

}  // namespace sluice::http1
