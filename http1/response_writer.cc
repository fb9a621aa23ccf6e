#include "http1/response_writer.h"

#include <charconv>
#include <cstring>

#include "core/ascii.h"
#include "core/bytes.h"

namespace sluice::http1 {

namespace {

constexpr std::string_view kCrlf = "\r\n";

// Copies `s` to *p and moves *p past it.
void Put(std::string_view s, char** p) {
  if (s.empty()) return;  // an empty view may be null, which memcpy must not get
  std::memcpy(*p, s.data(), s.size());
  *p += s.size();
}

// Copies a short `s` (a reason phrase, a few digits) byte by byte: cheaper than a call to memcpy
// for the few bytes these have.
void PutShort(std::string_view s, char** p) {
  char* out = *p;
  for (char c : s) *out++ = c;
  *p = out;
}

bool IsValidText(std::string_view s) { return FindInvalidFieldValueChar(s) == s.size(); }

// Checks the fields a caller passes: tokens for names, no CR/LF/NUL/controls in values (no
// response splitting), and nothing that would fight the writer's framing. Sets *size to the bytes
// of "name: value\r\n" for every field (measured in the same pass).
Status CheckFields(std::span<const Header> fields, size_t* size) {
  size_t n = 0;
  for (const Header& h : fields) {
    if (!IsToken(h.name)) return InvalidArgumentError("field name is not a token");
    if (!IsValidText(h.value)) return InvalidArgumentError("invalid character in field value");
    if (EqualsLowercase(h.name, "content-length") || EqualsLowercase(h.name, "transfer-encoding")) {
      return InvalidArgumentError("framing fields are written by the response writer");
    }
    n += h.name.size() + 2 + h.value.size() + 2;
  }
  *size = n;
  return OkStatus();
}

void PutFields(std::span<const Header> fields, char** p) {
  for (const Header& h : fields) {
    Put(h.name, p);
    Put(": ", p);
    Put(h.value, p);
    Put(kCrlf, p);
  }
}

// Reserves exactly `size` contiguous bytes, lets `fill` write them, commits them.
template <typename Fill>
Status WriteMeasured(size_t size, PipeWriter* out, Fill fill) {
  std::span<uint8_t> span = out->GetSpan(size);
  if (span.size() < size) return FailedPreconditionError("response writer: pipe completed");
  char* p = reinterpret_cast<char*>(span.data());
  fill(&p);
  return out->Advance(size);
}

}  // namespace

std::string_view ReasonPhrase(uint16_t status_code) {
  switch (status_code) {
    case 100:
      return "Continue";
    case 101:
      return "Switching Protocols";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 203:
      return "Non-Authoritative Information";
    case 204:
      return "No Content";
    case 205:
      return "Reset Content";
    case 206:
      return "Partial Content";
    case 300:
      return "Multiple Choices";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 303:
      return "See Other";
    case 304:
      return "Not Modified";
    case 307:
      return "Temporary Redirect";
    case 308:
      return "Permanent Redirect";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 402:
      return "Payment Required";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 406:
      return "Not Acceptable";
    case 407:
      return "Proxy Authentication Required";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 411:
      return "Length Required";
    case 412:
      return "Precondition Failed";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 416:
      return "Range Not Satisfiable";
    case 417:
      return "Expectation Failed";
    case 421:
      return "Misdirected Request";
    case 422:
      return "Unprocessable Content";
    case 426:
      return "Upgrade Required";
    case 428:
      return "Precondition Required";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 451:
      return "Unavailable For Legal Reasons";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "";
  }
}

namespace {

std::string_view NameOf(const Header& h) { return h.name; }
std::string_view ValueOf(const Header& h) { return h.value; }
std::string_view NameOf(const std::pair<std::string, std::string>& h) { return h.first; }
std::string_view ValueOf(const std::pair<std::string, std::string>& h) { return h.second; }

// SameBytes, with the 8 to 16 bytes most names and values have compared as two overlapping
// words, without a loop.
[[gnu::always_inline]] inline bool SameFieldBytes(const char* a, const char* b, size_t n) {
  if (n >= 8 && n <= 16) {
    uint64_t a0, a1, b0, b1;
    std::memcpy(&a0, a, 8);
    std::memcpy(&b0, b, 8);
    std::memcpy(&a1, a + n - 8, 8);
    std::memcpy(&b1, b + n - 8, 8);
    return ((a0 ^ b0) | (a1 ^ b1)) == 0;
  }
  return SameBytes(a, b, n);
}

}  // namespace

template <typename Field>
bool ResponseFieldsMemo::MatchesFields(std::span<const Field> fields) const {
  if (fields.size() != sizes_.size()) return false;
  const char* p = lines_.data();
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string_view name = NameOf(fields[i]);
    const std::string_view value = ValueOf(fields[i]);
    if (name.size() != sizes_[i].first || value.size() != sizes_[i].second) return false;
    if (!SameFieldBytes(name.data(), p, name.size())) return false;
    p += name.size() + 2;  // ": "
    if (!SameFieldBytes(value.data(), p, value.size())) return false;
    p += value.size() + 2;  // CRLF
  }
  return true;
}

bool ResponseFieldsMemo::Matches(std::span<const Header> fields) const {
  return MatchesFields(fields);
}

bool ResponseFieldsMemo::Matches(
    std::span<const std::pair<std::string, std::string>> fields) const {
  return MatchesFields(fields);
}

bool ResponseFieldsMemo::Remember(std::span<const Header> fields, size_t size) {
  sizes_.clear();
  lines_.clear();
  last_head_.bytes.clear();  // made of the fields before
  if (size > kMaxBytes) return false;
  lines_.resize(size);
  char* p = lines_.data();
  PutFields(fields, &p);
  for (const Header& h : fields) {
    sizes_.emplace_back(static_cast<uint32_t>(h.name.size()),
                        static_cast<uint32_t>(h.value.size()));
  }
  return true;
}

struct ResponseWriterAccess {
  using LastHead = ResponseFieldsMemo::LastHead;
  static LastHead& Last(ResponseFieldsMemo* memo) { return memo->last_head_; }
};

namespace {

// WriteResponseHead: with the fields *memo remembers when `fields_matched` (head.headers
// ignored), else with head.headers, checked against *memo (when not null) as the header says.
Status WriteHead(const ResponseHead& head, bool fields_matched, ResponseFieldsMemo* memo,
                 PipeWriter* out) {
  if (head.status_code < 100 || head.status_code > 999) {
    return InvalidArgumentError("status code outside 100..999");
  }
  if ((head.status_code < 200 || head.status_code == 204) &&
      head.framing != ResponseFraming::kNone) {
    return InvalidArgumentError("1xx and 204 responses have no body framing");
  }
  if (!head.body.empty() &&
      (head.framing != ResponseFraming::kContentLength || head.body.size() > head.content_length)) {
    return InvalidArgumentError("body bytes beyond the head's Content-Length");
  }
  // Only what the caller supplied is checked: the reason table and the date cache write valid
  // text.
  if (!head.reason.empty() && !IsValidText(head.reason)) {
    return InvalidArgumentError("invalid character in reason phrase");
  }
  std::string_view date = head.date;
  if (date.empty()) {
    http::DateCache& dates = http::DateCache::ForThisThread();
    date = head.steady_now != std::chrono::steady_clock::time_point() ? dates.Now(head.steady_now)
                                                                      : dates.Now();
  } else if (!IsValidText(date)) {
    return InvalidArgumentError("invalid character in Date");
  }
  // With a memo that holds them, the fields are copied as it serialized them.
  if (!fields_matched && memo != nullptr && memo->Matches(head.headers)) fields_matched = true;
  size_t fields_size = 0;
  bool fields_from_memo = false;
  if (fields_matched) {
    fields_size = memo->lines().size();
    fields_from_memo = true;
  } else {
    if (Status s = CheckFields(head.headers, &fields_size); !s.ok()) return s;
    if (memo != nullptr && memo->Remember(head.headers, fields_size)) fields_from_memo = true;
  }
  // The memo's last head, when this one is made of the same: its bytes are this head's.
  ResponseWriterAccess::LastHead* last = nullptr;
  if (fields_from_memo && head.reason.empty() && date.size() == http::kImfFixdateLength) {
    last = &ResponseWriterAccess::Last(memo);
    const bool same_length = head.framing != ResponseFraming::kContentLength ||
                             head.content_length == last->content_length;
    if (!last->bytes.empty() && last->status_code == head.status_code &&
        last->framing == head.framing && last->connection == head.connection && same_length &&
        SameBytes(last->date.data(), date.data(), http::kImfFixdateLength)) {
      return WriteMeasured(last->bytes.size() + head.body.size(), out, [&](char** p) {
        Put(last->bytes, p);
        Put({reinterpret_cast<const char*>(head.body.data()), head.body.size()}, p);
      });
    }
    // Kept only when the length repeats (see ResponseFieldsMemo).
    const bool keep =
        head.framing != ResponseFraming::kContentLength || head.content_length == last->last_length;
    last->last_length = head.content_length;
    if (!keep) last = nullptr;
  }
  std::string_view reason = head.reason;
  if (reason.empty()) {
    reason = head.status_code == 200 ? std::string_view("OK") : ReasonPhrase(head.status_code);
  }

  char length[24];
  size_t length_size = 0;
  if (head.framing == ResponseFraming::kContentLength) {
    length_size = static_cast<size_t>(
        std::to_chars(length, length + sizeof(length), head.content_length).ptr - length);
  }
  constexpr std::string_view kDate = "Date: ";
  constexpr std::string_view kContentLength = "Content-Length: ";
  constexpr std::string_view kChunked = "Transfer-Encoding: chunked\r\n";
  constexpr std::string_view kClose = "Connection: close\r\n";
  constexpr std::string_view kKeepAlive = "Connection: keep-alive\r\n";
  const std::string_view connection = head.connection == ConnectionOption::kClose ? kClose
                                      : head.connection == ConnectionOption::kKeepAlive
                                          ? kKeepAlive
                                          : std::string_view();

  // "HTTP/1.1 200 OK\r\n"
  size_t size = 9 + 3 + 1 + reason.size() + 2;
  size += kDate.size() + date.size() + 2;
  size += fields_size;
  if (head.framing == ResponseFraming::kContentLength) {
    size += kContentLength.size() + length_size + 2;
  } else if (head.framing == ResponseFraming::kChunked) {
    size += kChunked.size();
  }
  size += connection.size() + 2;
  size += head.body.size();

  return WriteMeasured(size, out, [&](char** p) {
    char* const start = *p;
    // Nearly every response is a 200 OK: its status line is a constant, copied without a call.
    constexpr std::string_view kOk = "HTTP/1.1 200 OK\r\n";
    if (head.status_code == 200 && head.reason.empty()) {
      Put(kOk, p);
    } else {
      Put("HTTP/1.1 ", p);
      char* code = *p;
      code[0] = static_cast<char>('0' + head.status_code / 100);
      code[1] = static_cast<char>('0' + head.status_code / 10 % 10);
      code[2] = static_cast<char>('0' + head.status_code % 10);
      code[3] = ' ';
      *p += 4;
      PutShort(reason, p);
      Put(kCrlf, p);
    }
    Put(kDate, p);
    if (date.size() == http::kImfFixdateLength) {
      // Always, but for a caller's own Date: a copy of constant size is a few moves, not a call.
      std::memcpy(*p, date.data(), http::kImfFixdateLength);
      *p += http::kImfFixdateLength;
    } else {
      Put(date, p);
    }
    Put(kCrlf, p);
    if (fields_from_memo) {
      Put(memo->lines(), p);
    } else {
      PutFields(head.headers, p);
    }
    if (head.framing == ResponseFraming::kContentLength) {
      Put(kContentLength, p);
      PutShort({length, length_size}, p);
      Put(kCrlf, p);
    } else if (head.framing == ResponseFraming::kChunked) {
      Put(kChunked, p);
    }
    Put(connection, p);
    Put(kCrlf, p);
    if (last != nullptr) {
      last->bytes.assign(start, static_cast<size_t>(*p - start));
      last->status_code = head.status_code;
      last->framing = head.framing;
      last->connection = head.connection;
      last->content_length =
          head.framing == ResponseFraming::kContentLength ? head.content_length : 0;
      std::memcpy(last->date.data(), date.data(), http::kImfFixdateLength);
    }
    Put({reinterpret_cast<const char*>(head.body.data()), head.body.size()}, p);
  });
}

}  // namespace

Status WriteResponseHead(const ResponseHead& head, PipeWriter* out) {
  return WriteHead(head, false, nullptr, out);
}

Status WriteResponseHead(const ResponseHead& head, ResponseFieldsMemo* memo, PipeWriter* out) {
  return WriteHead(head, false, memo, out);
}

Status WriteResponseHeadFromMemo(const ResponseHead& head, ResponseFieldsMemo* memo,
                                 PipeWriter* out) {
  return WriteHead(head, true, memo, out);
}

Status WriteContinue(PipeWriter* out) { return out->Write("HTTP/1.1 100 Continue\r\n\r\n"); }

Status WriteChunk(std::span<const uint8_t> data, PipeWriter* out) {
  if (data.empty()) return OkStatus();
  char line[20];
  char* end = std::to_chars(line, line + 16, data.size(), 16).ptr;
  *end++ = '\r';
  *end++ = '\n';
  if (Status s = out->Write(std::string_view(line, static_cast<size_t>(end - line))); !s.ok()) {
    return s;
  }
  if (Status s = out->Write(data); !s.ok()) return s;
  return out->Write(kCrlf);
}

Status WriteChunk(std::string_view data, PipeWriter* out) {
  return WriteChunk(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size()), out);
}

Status WriteLastChunk(std::span<const Header> trailers, PipeWriter* out) {
  size_t fields_size = 0;
  if (Status s = CheckFields(trailers, &fields_size); !s.ok()) return s;
  const size_t size = 3 + fields_size + 2;
  return WriteMeasured(size, out, [&](char** p) {
    Put("0\r\n", p);
    PutFields(trailers, p);
    Put(kCrlf, p);
  });
}

}  // namespace sluice::http1
