#include "http2/request_headers.h"

#include <array>

namespace sluice::http2 {
namespace {

// Per byte: what it may be in a header name (RFC 9110 token characters, lowercase only: RFC 9113
// §8.2.1) and whether it may be in a value (anything but NUL, CR, LF: §8.2.1).
enum : uint8_t { kNameChar = 1, kUppercase = 2, kValueChar = 4 };
constexpr std::array<uint8_t, 256> kCharClass = [] {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    if (c != 0 && c != '\r' && c != '\n') t[c] |= kValueChar;
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) t[c] |= kNameChar;
    if (c >= 'A' && c <= 'Z') t[c] |= kUppercase;
  }
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) t[static_cast<unsigned char>(c)] |= kNameChar;
  return t;
}();

const char* CheckName(std::string_view name) {
  if (name.empty()) return "empty header name";
  for (unsigned char c : name) {
    if ((kCharClass[c] & kNameChar) == 0) {
      return (kCharClass[c] & kUppercase) != 0 ? "uppercase header name"
                                                : "invalid character in header name";
    }
  }
  return nullptr;
}

const char* CheckValue(std::string_view value) {
  for (unsigned char c : value) {
    if ((kCharClass[c] & kValueChar) == 0) return "invalid character in header value";
  }
  if (!value.empty() && (value.front() == ' ' || value.front() == '\t' || value.back() == ' ' ||
                         value.back() == '\t')) {
    return "whitespace around header value";
  }
  return nullptr;
}

}  // namespace

RequestPseudoHeader PseudoHeaderOf(std::string_view name) {
  switch (name.size()) {
    case 5:
      return name == ":path" ? RequestPseudoHeader::kPath : RequestPseudoHeader::kNone;
    case 7:
      return name == ":method"   ? RequestPseudoHeader::kMethod
             : name == ":scheme" ? RequestPseudoHeader::kScheme
                                 : RequestPseudoHeader::kNone;
    case 10:
      return name == ":authority" ? RequestPseudoHeader::kAuthority : RequestPseudoHeader::kNone;
  }
  return RequestPseudoHeader::kNone;
}

bool IsConnectionSpecificField(std::string_view name) {
  switch (name.size()) {  // one comparison at most, for the length that can match
    case 7:
      return name == "upgrade";
    case 10:
      return name == "connection" || name == "keep-alive";
    case 16:
      return name == "proxy-connection";
    case 17:
      return name == "transfer-encoding";
  }
  return false;
}

void RequestHeaderCheck::Reset(bool trailers) {
  *this = RequestHeaderCheck();
  trailers_ = trailers;
}

const char* RequestHeaderCheck::Check(std::string_view name, std::string_view value,
                                      RequestPseudoHeader* pseudo) {
  *pseudo = RequestPseudoHeader::kNone;
  if (!name.empty() && name[0] == ':') {
    if (trailers_) return "pseudo-header in trailers";
    if (regular_seen_) return "pseudo-header after a regular header";
    const RequestPseudoHeader which = PseudoHeaderOf(name);
    const uint8_t bit = static_cast<uint8_t>(which);
    if (bit == 0) return "unknown pseudo-header";
    if ((pseudo_seen_ & bit) != 0) return "duplicate pseudo-header";
    pseudo_seen_ |= bit;
    if (const char* problem = CheckValue(value)) return problem;
    *pseudo = which;
    switch (which) {
      case RequestPseudoHeader::kMethod:
        has_method_ = !value.empty();
        is_connect_ = value == "CONNECT";
        is_options_ = value == "OPTIONS";
        break;
      case RequestPseudoHeader::kScheme:
        has_scheme_ = !value.empty();
        break;
      case RequestPseudoHeader::kPath:
        has_path_ = !value.empty();
        path_form_ = !has_path_        ? PathForm::kNone
                     : value[0] == '/' ? PathForm::kAbsolute
                     : value == "*"    ? PathForm::kAsterisk
                                       : PathForm::kOther;
        break;
      case RequestPseudoHeader::kAuthority:
        has_authority_ = !value.empty();
        break;
      case RequestPseudoHeader::kNone:
        break;
    }
    return nullptr;
  }
  regular_seen_ = true;
  if (const char* problem = CheckName(name)) return problem;
  if (IsConnectionSpecificField(name)) return "connection-specific header";
  if (name == "te" && value != "trailers") return "te other than trailers";
  return CheckValue(value);
}

const char* RequestHeaderCheck::Finish() const {
  if (!has_method_) return "missing :method";
  if (is_connect_) {
    if (has_scheme_ || has_path_ || !has_authority_) {
      return "CONNECT with :scheme or :path, or without :authority";
    }
    return nullptr;
  }
  if (!has_scheme_ || !has_path_) return "missing :scheme or :path";
  // RFC 9113 §8.3.1: for http and https, an absolute path (and query), or `*` for OPTIONS alone.
  // The server serves every request as one or the other (Request::scheme), so the rule is asked
  // of every scheme: another scheme's path would reach the router as an http one.
  if (path_form_ != PathForm::kAbsolute && !(path_form_ == PathForm::kAsterisk && is_options_)) {
    return ":path neither an absolute path nor * for OPTIONS";
  }
  return nullptr;
}

}  // namespace sluice::http2
