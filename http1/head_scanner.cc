#include "http1/head_scanner.h"

namespace sluice::http1 {

namespace {

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

size_t ContiguousInput::CopyTo(size_t offset, std::span<uint8_t> out) const {
  if (offset >= bytes_.size()) return 0;
  const size_t n = std::min(out.size(), bytes_.size() - offset);
  if (n > 0) std::memcpy(out.data(), bytes_.data() + offset, n);
  return n;
}

std::string_view FindField(const std::vector<Header>& fields, std::string_view name) {
  for (const Header& h : fields) {
    if (EqualsLowercase(h.name, name)) return h.value;
  }
  return {};
}

void FramingFields::TakeConnection(std::string_view value) {
  while (!value.empty()) {
    const std::string_view option = NextListElement(&value);
    if (EqualsLowercase(option, "close")) connection_close_ = true;
    if (EqualsLowercase(option, "keep-alive")) connection_keep_alive_ = true;
  }
}

std::string_view FramingFields::TakeContentLength(std::string_view value) {
  // Any repetition is refused, even of the same value: simpler and safer than comparing (RFC 9112
  // §6.3 allows either).
  if (content_length_seen_) return "repeated Content-Length";
  if (!ParseContentLength(value, &content_length_)) return "invalid Content-Length";
  content_length_seen_ = true;
  return {};
}

std::string_view FramingFields::TakeTransferEncoding(std::string_view value) {
  transfer_encoding_seen_ = true;
  bool any = false;
  while (!value.empty()) {
    const std::string_view coding = NextListElement(&value);
    if (coding.empty()) continue;  // empty list elements do not count (RFC 9110 §5.6.1)
    any = true;
    if (EqualsLowercase(coding, "chunked")) {
      if (chunked_seen_) return "chunked applied more than once";
      chunked_seen_ = chunked_last_ = true;
      continue;
    }
    if (chunked_seen_ && after_chunked_ == CodingAfterChunked::kRefused) {
      return "chunked is not the final transfer coding";
    }
    if (!IsToken(TrimOws(coding.substr(0, coding.find(';'))))) return "invalid transfer coding";
    other_coding_ = true;
    chunked_last_ = false;
  }
  if (!any) return "empty Transfer-Encoding";
  return {};
}

std::string_view FramingFields::Conflict(uint8_t version_minor, std::string_view in_http10) const {
  if (!transfer_encoding_seen_) return {};
  if (content_length_seen_) return "Transfer-Encoding with Content-Length";
  if (version_minor == 0) return in_http10;
  return {};
}

char* HeadScanner::Scratch(size_t size) {
  if (scratch_size_ < size) {
    // Bounded by the limits: at most max_start_line + 2 + max_header_bytes.
    scratch_size_ = std::max(size, 2 * scratch_size_);
    scratch_.reset(new char[scratch_size_]);
  }
  return scratch_.get();
}

}  // namespace sluice::http1
