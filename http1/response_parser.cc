#include "http1/response_parser.h"

#include <string_view>

namespace sluice::http1 {

namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::string_view ResponseHead::Find(std::string_view name) const {
  return FindField(headers, name);
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

struct ResponseParser::StatusLine {
  using Outcome = ResponseParseOutcome;

  Outcome Fail(HeadFault fault) { return parser->Fail(fault); }
  Outcome CheckStartLine(std::string_view line) { return parser->CheckStatusLine(line); }
  Outcome Head(const ScannedHead& scanned) {
    return parser->ParseHead(scanned, head_request, head);
  }

  ResponseParser* parser;
  bool head_request;
  ResponseHead* head;
};

ResponseParser::ResponseParser(ResponseParseLimits limits)
    : limits_(limits),
      scanner_(HeadScanLimits{.max_start_line = limits.max_status_line,
                              .max_header_bytes = limits.max_header_bytes,
                              .max_header_count = limits.max_header_count,
                              // A response has none: an empty line is not a status line.
                              .max_leading_empty_lines = 0}) {}

ResponseParseOutcome ResponseParser::Parse(const BufferSequence& input, size_t offset,
                                           bool head_request, ResponseHead* head) {
  StatusLine line{this, head_request, head};
  return scanner_.Scan(input, offset, input.size(), line);
}

ResponseParseOutcome ResponseParser::Parse(std::string_view input, bool head_request,
                                           ResponseHead* head) {
  StatusLine line{this, head_request, head};
  return scanner_.Scan(ContiguousInput(input), 0, input.size(), line);
}

ResponseParseOutcome ResponseParser::Fail(StatusCode code, std::string_view reason) {
  ++counters_.errors;
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

ResponseParseOutcome ResponseParser::Fail(HeadFault fault) {
  switch (fault) {
    case HeadFault::kOffsetPastEnd:
      return Fail(StatusCode::kInvalidArgument, "offset past the end of the input");
    case HeadFault::kStartLineTooLong:
      return LimitExceeded(&counters_.status_line_too_long, "status line too long");
    case HeadFault::kHeaderSectionTooLarge:
      return LimitExceeded(&counters_.header_bytes_too_large, "header section too large");
    case HeadFault::kTooManyFields:
      return LimitExceeded(&counters_.header_count_too_large, "too many header fields");
    case HeadFault::kTooManyEmptyLines:
      return Fail(StatusCode::kInvalidArgument, "empty line before status line");
    case HeadFault::kBareLf:
      break;
  }
  return Fail(StatusCode::kInvalidArgument, "bare LF line ending");
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
  line_.status_code = static_cast<uint16_t>(code);
  line_.version_minor = static_cast<uint8_t>(line[7] - '0');
  return ResponseParseOutcome();
}

ResponseParseOutcome ResponseParser::ParseHead(const ScannedHead& scanned, bool head_request,
                                               ResponseHead* head) {
  if (scanned.linearized) ++counters_.linearized;
  const LineParts& l = line_;
  head->Clear();
  head->status_code = l.status_code;
  head->version_minor = l.version_minor;
  head->reason = scanned.start_line_size > 13
                     ? std::string_view(scanned.bytes + 13, scanned.start_line_size - 13)
                     : std::string_view();

  FramingFields framing(FramingFields::CodingAfterChunked::kAllowed);
  const std::string_view bad_field = ParseFieldLines(
      scanned, &framing, &head->headers, [](const Header&) { return std::string_view(); });
  if (!bad_field.empty()) return Fail(StatusCode::kInvalidArgument, bad_field);

  // Framing (RFC 9112 §6.1, §6.3). The conflicts are refused whatever the status: a response
  // carrying both lengths is a response-splitting attempt or a broken server.
  const std::string_view conflict =
      framing.Conflict(l.version_minor, "Transfer-Encoding in an HTTP/1.0 response");
  if (!conflict.empty()) return Fail(StatusCode::kInvalidArgument, conflict);
  const uint16_t code = l.status_code;
  if (head_request || code < 200 || code == 204 || code == 304) {
    head->framing = ResponseFraming::kNone;
  } else if (framing.transfer_encoding_seen()) {
    head->framing =
        framing.chunked_last() ? ResponseFraming::kChunked : ResponseFraming::kUntilClose;
  } else if (framing.content_length_seen()) {
    head->framing = ResponseFraming::kContentLength;
    head->content_length = framing.content_length();
  } else {
    head->framing = ResponseFraming::kUntilClose;
  }
  head->keep_alive = framing.KeepAlive(l.version_minor);
  if (head->framing == ResponseFraming::kUntilClose || code == 101) head->keep_alive = false;

  if (code < 200 && code != 101) {
    // An interim response: skipped, and the scan looks for the next head right after.
    ++counters_.interim_responses;
    if (scanned.skipped + 1 > limits_.max_interim_responses) {
      return LimitExceeded(&counters_.interim_responses_too_many, "too many 1xx responses");
    }
    head->Clear();
    return ResponseParseOutcome();
  }
  ResponseParseOutcome r;
  r.status = ResponseParseStatus::kComplete;
  r.consumed = scanned.end;
  r.interim_responses = scanned.skipped;
  ++counters_.responses;
  return r;
}

}  // namespace sluice::http1
