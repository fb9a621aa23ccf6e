// The checks RFC 9113 makes of a request's header block (§8.2 field validity, §8.3 request
// pseudo-header fields), one field at a time as HPACK decodes them, without allocating: lowercase
// token names, values without NUL/CR/LF or surrounding whitespace, no connection-specific fields,
// `te` only as "trailers", pseudo-headers known, once each, before every regular field and never in
// trailers, and at the end :method, :scheme and :path present (CONNECT: :authority and neither of
// the other two). A block that fails any of them is malformed: the stream gets RST_STREAM
// (PROTOCOL_ERROR), the connection goes on (http2/connection.cc).
//
//   RequestHeaderCheck check;
//   check.Reset(/*trailers=*/false);
//   RequestPseudoHeader pseudo;
//   if (const char* problem = check.Check(name, value, &pseudo)) { ... malformed: `problem` ... }
//   ...
//   if (const char* problem = check.Finish()) { ... }
//
// Thread contract: thread-compatible (one connection's loop).
#ifndef SLUICE_HTTP2_REQUEST_HEADERS_H_
#define SLUICE_HTTP2_REQUEST_HEADERS_H_

#include <cstdint>
#include <string_view>

namespace sluice::http2 {

// Connection-specific fields (RFC 9113 §8.2.2), which HTTP/2 forbids in either direction; the name
// lowercase.
bool IsConnectionSpecificField(std::string_view name);

// A request pseudo-header field (RFC 9113 §8.3.1), or kNone for a regular field.
enum class RequestPseudoHeader : uint8_t {
  kNone = 0,
  kMethod = 1,
  kScheme = 2,
  kPath = 4,
  kAuthority = 8,
};

// Which pseudo-header `name` is (kNone for any other name, a regular field's or an unknown
// pseudo-header's).
RequestPseudoHeader PseudoHeaderOf(std::string_view name);

class RequestHeaderCheck {
 public:
  // Starts a block: a request's head, or (trailers) the trailer section of an open request.
  void Reset(bool trailers);

  // Checks the next field of the block. nullptr if it may stand, else why the block is malformed
  // (a static string). *pseudo says which pseudo-header it is (kNone: a regular field).
  const char* Check(std::string_view name, std::string_view value, RequestPseudoHeader* pseudo);

  // After a request head's last field: nullptr, or why it is malformed (a missing pseudo-header).
  // Not for trailers.
  const char* Finish() const;

  // A non-empty :authority was seen (a `host` field then does not set the authority).
  bool has_authority() const { return has_authority_; }

 private:
  bool trailers_ = false;
  bool regular_seen_ = false;
  uint8_t pseudo_seen_ = 0;  // RequestPseudoHeader bits
  bool has_method_ = false;
  bool is_connect_ = false;
  bool has_scheme_ = false;  // present and not empty, as :path and :authority
  bool has_path_ = false;
  bool has_authority_ = false;
  bool is_options_ = false;
  enum class PathForm : uint8_t { kNone, kAbsolute, kAsterisk, kOther };
  PathForm path_form_ = PathForm::kNone;
};

}  // namespace sluice::http2

#endif  // SLUICE_HTTP2_REQUEST_HEADERS_H_
