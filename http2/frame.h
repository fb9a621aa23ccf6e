// HTTP/2 framing (RFC 9113 §4 and §6): frame types, error codes, the
// decoder that validates one frame from contiguous bytes, and serializers
// for the frames both peers send.
//
// The decoder checks everything a single frame can get wrong by itself
// (length for its type, stream id 0 or not, padding, flags, SETTINGS
// values) and returns an `Http2Error` that already says whether it is a
// connection or a stream error and which RFC code it carries. What depends
// on connection state (stream states, CONTINUATION sequencing, flow
// control) is the connection's job.
//
//   sluice::http2::Frame frame;
//   size_t used = 0;
//   sluice::http2::DecodeStatus s =
//       sluice::http2::DecodeFrame(bytes, /*max_frame_size=*/16384, &frame, &used);
//   if (s.result == DecodeResult::kNeedMore) { /* wait for more bytes */ }
//   else if (s.result == DecodeResult::kError) { /* s.error: GOAWAY or RST_STREAM */ }
//   else { /* frame valid; used bytes consumed */ }
//
// Thread-safety: stateless functions and value types.
#ifndef SLUICE_HTTP2_FRAME_H_
#define SLUICE_HTTP2_FRAME_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::http2 {

inline constexpr size_t kFrameHeaderSize = 9;
// "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
inline constexpr std::string_view kClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
inline constexpr uint32_t kMaxStreamId = 0x7fffffff;
inline constexpr int64_t kMaxWindowSize = 0x7fffffff;
inline constexpr uint32_t kDefaultInitialWindowSize = 65535;
inline constexpr uint32_t kMinMaxFrameSize = 16384;
inline constexpr uint32_t kMaxMaxFrameSize = 16777215;

enum class FrameType : uint8_t {
  kData = 0x0,
  kHeaders = 0x1,
  kPriority = 0x2,
  kRstStream = 0x3,
  kSettings = 0x4,
  kPushPromise = 0x5,
  kPing = 0x6,
  kGoaway = 0x7,
  kWindowUpdate = 0x8,
  kContinuation = 0x9,
};
// "DATA", "HEADERS", ...; "UNKNOWN" for extension types.
std::string_view FrameTypeName(uint8_t type);

namespace flags {
inline constexpr uint8_t kEndStream = 0x1;
inline constexpr uint8_t kAck = 0x1;
inline constexpr uint8_t kEndHeaders = 0x4;
inline constexpr uint8_t kPadded = 0x8;
inline constexpr uint8_t kPriority = 0x20;
}  // namespace flags

// RFC 9113 §7.
enum class ErrorCode : uint32_t {
  kNoError = 0x0,
  kProtocolError = 0x1,
  kInternalError = 0x2,
  kFlowControlError = 0x3,
  kSettingsTimeout = 0x4,
  kStreamClosed = 0x5,
  kFrameSizeError = 0x6,
  kRefusedStream = 0x7,
  kCancel = 0x8,
  kCompressionError = 0x9,
  kConnectError = 0xa,
  kEnhanceYourCalm = 0xb,
  kInadequateSecurity = 0xc,
  kHttp11Required = 0xd,
};
// "PROTOCOL_ERROR", ...; "UNKNOWN" for codes outside RFC 9113.
std::string_view ErrorCodeName(ErrorCode code);

// An HTTP/2 error with its scope and RFC code fixed at creation
// (docs/style.md). Only the connection's loop turns it into a GOAWAY
// (connection scope) or an RST_STREAM (stream scope).
class Http2Error {
 public:
  static Http2Error Connection(ErrorCode code, std::string_view debug) {
    return Http2Error(true, 0, code, debug);
  }
  static Http2Error Stream(uint32_t stream_id, ErrorCode code, std::string_view debug) {
    return Http2Error(false, stream_id, code, debug);
  }
  Http2Error() = default;

  bool is_connection_error() const { return connection_; }
  uint32_t stream_id() const { return stream_id_; }
  ErrorCode code() const { return code_; }
  // The reason, sent as GOAWAY debug data ("SETTINGS: invalid MAX_FRAME_SIZE").
  const std::string& debug() const { return debug_; }

 private:
  Http2Error(bool connection, uint32_t stream_id, ErrorCode code, std::string_view debug)
      : connection_(connection), stream_id_(stream_id), code_(code), debug_(debug) {}

  bool connection_ = true;
  uint32_t stream_id_ = 0;
  ErrorCode code_ = ErrorCode::kNoError;
  std::string debug_;
};

struct FrameHeader {
  uint32_t length = 0;  // payload length, 24 bits
  uint8_t type = 0;     // FrameType, or an extension type
  uint8_t flags = 0;
  uint32_t stream_id = 0;  // reserved bit cleared
};

// Reads the 9-byte header at `bytes` (which must hold at least 9 bytes). Inline: once per frame
// read, on every connection's hot path.
inline FrameHeader ReadFrameHeader(const uint8_t* bytes) {
  FrameHeader header;
  header.length = uint32_t{bytes[0]} << 16 | uint32_t{bytes[1]} << 8 | uint32_t{bytes[2]};
  header.type = bytes[3];
  header.flags = bytes[4];
  header.stream_id = (uint32_t{bytes[5]} << 24 | uint32_t{bytes[6]} << 16 |
                      uint32_t{bytes[7]} << 8 | uint32_t{bytes[8]}) &
                     kMaxStreamId;
  return header;
}
// Writes a 9-byte header to `out`. Inline, as ReadFrameHeader: once per frame written.
inline void WriteFrameHeader(uint8_t* out, uint32_t length, FrameType type, uint8_t flags,
                             uint32_t stream_id) {
  out[0] = static_cast<uint8_t>(length >> 16);
  out[1] = static_cast<uint8_t>(length >> 8);
  out[2] = static_cast<uint8_t>(length);
  out[3] = static_cast<uint8_t>(type);
  out[4] = flags;
  // The reserved bit MUST be unset when sending (RFC 9113 §4.1).
  const uint32_t id = stream_id & kMaxStreamId;
  out[5] = static_cast<uint8_t>(id >> 24);
  out[6] = static_cast<uint8_t>(id >> 16);
  out[7] = static_cast<uint8_t>(id >> 8);
  out[8] = static_cast<uint8_t>(id);
}

enum class SettingId : uint16_t {
  kHeaderTableSize = 0x1,
  kEnablePush = 0x2,
  kMaxConcurrentStreams = 0x3,
  kInitialWindowSize = 0x4,
  kMaxFrameSize = 0x5,
  kMaxHeaderListSize = 0x6,
};

struct Setting {
  uint16_t id = 0;  // SettingId, or an unknown id (ignored by receivers)
  uint32_t value = 0;
};

struct PriorityFields {
  uint32_t dependency = 0;  // exclusive bit cleared
  bool exclusive = false;
  uint8_t weight = 0;  // as sent (weight - 1)
};

// One decoded frame. Spans point into the bytes given to DecodeFrame.
struct Frame {
  FrameHeader header;
  // DATA: the data; HEADERS, CONTINUATION, PUSH_PROMISE: the header block
  // fragment. Padding and priority fields are removed.
  std::span<const uint8_t> payload;
  // HEADERS with the PRIORITY flag, and PRIORITY frames.
  bool has_priority = false;
  PriorityFields priority;
  // RST_STREAM, GOAWAY.
  ErrorCode error_code = ErrorCode::kNoError;
  // GOAWAY.
  uint32_t last_stream_id = 0;
  std::span<const uint8_t> debug_data;
  // WINDOW_UPDATE (never 0 in a decoded frame).
  uint32_t window_increment = 0;
  // PING.
  std::array<uint8_t, 8> ping_data{};
  // SETTINGS (known ids validated, unknown ones kept for the caller to skip).
  std::vector<Setting> settings;
  // PUSH_PROMISE.
  uint32_t promised_stream_id = 0;

  bool has_flag(uint8_t f) const { return (header.flags & f) != 0; }
  FrameType type() const { return static_cast<FrameType>(header.type); }
};

enum class DecodeResult : uint8_t { kFrame, kNeedMore, kError };

struct DecodeStatus {
  DecodeResult result = DecodeResult::kNeedMore;
  Http2Error error;  // when result == kError
};

// Decodes the frame at the start of `bytes`. Returns kNeedMore (and leaves
// *frame alone) until the whole frame is there; kError with the error to
// send (a frame longer than `max_frame_size` is a FRAME_SIZE_ERROR as soon
// as its header is in); kFrame with *consumed set to 9 + length. Extension
// frame types decode as kFrame with only the header and payload set.
//
// Checks (RFC 9113 §6): stream id zero/non-zero per type (PROTOCOL_ERROR);
// fixed lengths of PRIORITY (5, stream FRAME_SIZE_ERROR), RST_STREAM (4),
// PING (8), WINDOW_UPDATE (4), SETTINGS (multiple of 6, empty with ACK;
// FRAME_SIZE_ERROR); padding not shorter than the payload
// (PROTOCOL_ERROR); a zero WINDOW_UPDATE increment (PROTOCOL_ERROR, of the
// stream or the connection); SETTINGS values: ENABLE_PUSH not 0/1
// (PROTOCOL_ERROR), INITIAL_WINDOW_SIZE over 2^31-1 (FLOW_CONTROL_ERROR),
// MAX_FRAME_SIZE outside [2^14, 2^24-1] (PROTOCOL_ERROR); a PRIORITY that
// depends on its own stream (stream PROTOCOL_ERROR).
[[nodiscard]] DecodeStatus DecodeFrame(std::span<const uint8_t> bytes, uint32_t max_frame_size,
                                       Frame* frame, size_t* consumed);

// Serializers: each appends one complete frame to *out.
void AppendSettings(std::span<const Setting> settings, std::string* out);
void AppendSettingsAck(std::string* out);
void AppendPing(const std::array<uint8_t, 8>& data, bool ack, std::string* out);
void AppendGoaway(uint32_t last_stream_id, ErrorCode code, std::string_view debug,
                  std::string* out);
void AppendRstStream(uint32_t stream_id, ErrorCode code, std::string* out);
void AppendWindowUpdate(uint32_t stream_id, uint32_t increment, std::string* out);
void AppendPriority(uint32_t stream_id, const PriorityFields& priority, std::string* out);
// DATA with `data` (no padding); `data.size()` must fit the peer's max
// frame size (the caller splits).
void AppendData(uint32_t stream_id, std::span<const uint8_t> data, bool end_stream,
                std::string* out);
// HEADERS carrying `block`, split into HEADERS + CONTINUATION frames of at
// most `max_frame_size` payload bytes each.
void AppendHeaders(uint32_t stream_id, std::span<const uint8_t> block, bool end_stream,
                   uint32_t max_frame_size, std::string* out);

}  // namespace sluice::http2

#endif  // SLUICE_HTTP2_FRAME_H_
