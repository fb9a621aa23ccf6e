#include "http2/frame.h"

#include <algorithm>
#include <cstring>

namespace sluice::http2 {
namespace {

uint16_t ReadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

uint32_t ReadU32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

// Stream ids, GOAWAY's last stream id, WINDOW_UPDATE's increment and PRIORITY's dependency share
// one layout: a reserved (or exclusive) bit, then 31 bits.
uint32_t ReadU31(const uint8_t* p) { return ReadU32(p) & kMaxStreamId; }

void PutU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

void PutU32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

// Grows *out by `n` bytes and returns where they start, for a serializer to fill.
uint8_t* Extend(std::string* out, size_t n) {
  const size_t old_size = out->size();
  out->resize(old_size + n);
  return reinterpret_cast<uint8_t*>(out->data()) + old_size;
}

// memcpy with a null source is undefined even for zero bytes (an empty span or string_view may
// carry a null pointer).
void Copy(uint8_t* to, const void* from, size_t n) {
  if (n > 0) std::memcpy(to, from, n);
}

DecodeStatus Ok() { return DecodeStatus{DecodeResult::kFrame, Http2Error()}; }

DecodeStatus ConnectionError(ErrorCode code, std::string_view debug) {
  return DecodeStatus{DecodeResult::kError, Http2Error::Connection(code, debug)};
}

DecodeStatus StreamError(uint32_t stream_id, ErrorCode code, std::string_view debug) {
  return DecodeStatus{DecodeResult::kError, Http2Error::Stream(stream_id, code, debug)};
}

void ReadPriority(const uint8_t* p, PriorityFields* priority) {
  priority->exclusive = (p[0] & 0x80) != 0;
  priority->dependency = ReadU31(p);
  priority->weight = p[4];
}

// The debug strings of the checks several frame types share; each starts with the type's name.
struct Messages {
  std::string_view stream_id_zero;
  std::string_view no_room_for_pad_length;
  std::string_view padding_exceeds_payload;
};

constexpr Messages kDataMessages = {"DATA: stream id 0", "DATA: no room for pad length",
                                    "DATA: padding exceeds payload"};
constexpr Messages kHeadersMessages = {"HEADERS: stream id 0", "HEADERS: no room for pad length",
                                       "HEADERS: padding exceeds payload"};
constexpr Messages kPushPromiseMessages = {"PUSH_PROMISE: stream id 0",
                                           "PUSH_PROMISE: no room for pad length",
                                           "PUSH_PROMISE: padding exceeds payload"};

// For DATA, HEADERS and PUSH_PROMISE: reads the pad length field of a PADDED frame. On success
// *begin is the offset after that field (0 without PADDED) and *pad_length the padding to cut
// off the end once the fields in between (priority, promised stream id) are read: CutPadding.
DecodeStatus ReadPadLength(const FrameHeader& header, const uint8_t* payload,
                           const Messages& messages, size_t* begin, size_t* pad_length) {
  *begin = 0;
  *pad_length = 0;
  if ((header.flags & flags::kPadded) == 0) return Ok();
  // The pad length field itself does not fit: a malformed size rather than bad padding.
  if (header.length < 1)
    return ConnectionError(ErrorCode::kFrameSizeError, messages.no_room_for_pad_length);
  *pad_length = payload[0];
  *begin = 1;
  return Ok();
}

DecodeStatus CutPadding(const FrameHeader& header, const Messages& messages, size_t begin,
                        size_t pad_length, size_t* end) {
  // RFC 9113 §6.1, §6.2: padding as long as what it pads, or longer, is a PROTOCOL_ERROR. `begin`
  // never exceeds the length here (the callers check the fixed fields fit).
  if (pad_length > header.length - begin) {
    return ConnectionError(ErrorCode::kProtocolError, messages.padding_exceeds_payload);
  }
  *end = header.length - pad_length;
  return Ok();
}

DecodeStatus DecodeData(const FrameHeader& header, const uint8_t* payload, Frame* frame) {
  if (header.stream_id == 0) {
    return ConnectionError(ErrorCode::kProtocolError, kDataMessages.stream_id_zero);
  }
  if ((header.flags & flags::kPadded) == 0) {  // the common case: the payload is the data
    frame->payload = {payload, header.length};
    return Ok();
  }
  size_t begin = 0;
  size_t pad_length = 0;
  size_t end = 0;
  if (DecodeStatus s = ReadPadLength(header, payload, kDataMessages, &begin, &pad_length);
      s.result != DecodeResult::kFrame) {
    return s;
  }
  if (DecodeStatus s = CutPadding(header, kDataMessages, begin, pad_length, &end);
      s.result != DecodeResult::kFrame) {
    return s;
  }
  frame->payload = {payload + begin, end - begin};
  return Ok();
}

DecodeStatus DecodeHeaders(const FrameHeader& header, const uint8_t* payload, Frame* frame) {
  if (header.stream_id == 0) {
    return ConnectionError(ErrorCode::kProtocolError, kHeadersMessages.stream_id_zero);
  }
  if ((header.flags & (flags::kPadded | flags::kPriority)) == 0) {
    // The common case: the payload is the header block fragment.
    frame->payload = {payload, header.length};
    return Ok();
  }
  size_t begin = 0;
  size_t pad_length = 0;
  size_t end = 0;
  if (DecodeStatus s = ReadPadLength(header, payload, kHeadersMessages, &begin, &pad_length);
      s.result != DecodeResult::kFrame) {
    return s;
  }
  if ((header.flags & flags::kPriority) != 0) {
    if (header.length - begin < 5) {
      return ConnectionError(ErrorCode::kFrameSizeError, "HEADERS: too short for priority");
    }
    frame->has_priority = true;
    ReadPriority(payload + begin, &frame->priority);
    begin += 5;
  }
  if (DecodeStatus s = CutPadding(header, kHeadersMessages, begin, pad_length, &end);
      s.result != DecodeResult::kFrame) {
    return s;
  }
  frame->payload = {payload + begin, end - begin};
  // A stream error, but the frame is filled in completely: the connection must still feed the
  // fragment to its HPACK decoder, or the peer's dynamic table and ours diverge.
  if (frame->has_priority && frame->priority.dependency == header.stream_id) {
    return StreamError(header.stream_id, ErrorCode::kProtocolError,
                       "HEADERS: stream depends on itself");
  }
  return Ok();
}

DecodeStatus DecodePriority(const FrameHeader& header, const uint8_t* payload, Frame* frame) {
  if (header.stream_id == 0) {
    return ConnectionError(ErrorCode::kProtocolError, "PRIORITY: stream id 0");
  }
  if (header.length != 5) {
    return StreamError(header.stream_id, ErrorCode::kFrameSizeError, "PRIORITY: length must be 5");
  }
  frame->has_priority = true;
  ReadPriority(payload, &frame->priority);
  if (frame->priority.dependency == header.stream_id) {
    return StreamError(header.stream_id, ErrorCode::kProtocolError,
                       "PRIORITY: stream depends on itself");
  }
  return Ok();
}

DecodeStatus DecodeRstStream(const FrameHeader& header, const uint8_t* payload, Frame* frame) {
  if (header.stream_id == 0) {
    return ConnectionError(ErrorCode::kProtocolError, "RST_STREAM: stream id 0");
  }
  if (header.length != 4) {
    return ConnectionError(ErrorCode::kFrameSizeError, "RST_STREAM: length must be 4");
  }
  frame->error_code = static_cast<ErrorCode>(ReadU32(payload));
  return Ok();
}

DecodeStatus DecodeSettings(const FrameHeader& header, const uint8_t* payload, Frame* frame) {
  if (header.stream_id != 0) {
    return ConnectionError(ErrorCode::kProtocolError, "SETTINGS: stream id not 0");
  }
  if ((header.flags & flags::kAck) != 0 && header.length != 0) {
    return ConnectionError(ErrorCode::kFrameSizeError, "SETTINGS: ACK with payload");
  }
  if (header.length % 6 != 0) {
    return ConnectionError(ErrorCode::kFrameSizeError, "SETTINGS: length not a multiple of 6");
  }
  // Allocates only when the caller's Frame has not yet held this many settings.
  frame->settings.reserve(header.length / 6);
  for (const uint8_t* p = payload; p != payload + header.length; p += 6) {
    const Setting setting{ReadU16(p), ReadU32(p + 2)};
    switch (static_cast<SettingId>(setting.id)) {
      case SettingId::kEnablePush:
        if (setting.value > 1) {
          return ConnectionError(ErrorCode::kProtocolError, "SETTINGS: invalid ENABLE_PUSH");
        }
        break;
      case SettingId::kInitialWindowSize:
        if (setting.value > kMaxWindowSize) {
          return ConnectionError(ErrorCode::kFlowControlError,
                                 "SETTINGS: invalid INITIAL_WINDOW_SIZE");
        }
        break;
      case SettingId::kMaxFrameSize:
        if (setting.value < kMinMaxFrameSize || setting.value > kMaxMaxFrameSize) {
          return ConnectionError(ErrorCode::kProtocolError, "SETTINGS: invalid MAX_FRAME_SIZE");
        }
        break;
      case SettingId::kHeaderTableSize:
      case SettingId::kMaxConcurrentStreams:
      case SettingId::kMaxHeaderListSize:
        break;
    }
    frame->settings.push_back(setting);
  }
  return Ok();
}

DecodeStatus DecodePushPromise(const FrameHeader& header, const uint8_t* payload, Frame* frame) {
  if (header.stream_id == 0) {
    return ConnectionError(ErrorCode::kProtocolError, kPushPromiseMessages.stream_id_zero);
  }
  size_t begin = 0;
  size_t pad_length = 0;
  size_t end = 0;
  if (DecodeStatus s = ReadPadLength(header, payload, kPushPromiseMessages, &begin, &pad_length);
      s.result != DecodeResult::kFrame) {
    return s;
  }
  if (header.length - begin < 4) {
    return ConnectionError(ErrorCode::kFrameSizeError,
                           "PUSH_PROMISE: too short for promised stream id");
  }
  frame->promised_stream_id = ReadU31(payload + begin);
  begin += 4;
  if (DecodeStatus s = CutPadding(header, kPushPromiseMessages, begin, pad_length, &end);
      s.result != DecodeResult::kFrame) {
    return s;
  }
  frame->payload = {payload + begin, end - begin};
  return Ok();
}

DecodeStatus DecodePing(const FrameHeader& header, const uint8_t* payload, Frame* frame) {
  if (header.stream_id != 0) {
    return ConnectionError(ErrorCode::kProtocolError, "PING: stream id not 0");
  }
  if (header.length != 8)
    return ConnectionError(ErrorCode::kFrameSizeError, "PING: length must be 8");
  std::memcpy(frame->ping_data.data(), payload, 8);
  return Ok();
}

DecodeStatus DecodeGoaway(const FrameHeader& header, const uint8_t* payload, Frame* frame) {
  if (header.stream_id != 0) {
    return ConnectionError(ErrorCode::kProtocolError, "GOAWAY: stream id not 0");
  }
  if (header.length < 8) {
    return ConnectionError(ErrorCode::kFrameSizeError, "GOAWAY: length must be at least 8");
  }
  frame->last_stream_id = ReadU31(payload);
  frame->error_code = static_cast<ErrorCode>(ReadU32(payload + 4));
  frame->debug_data = {payload + 8, header.length - 8};
  return Ok();
}

DecodeStatus DecodeWindowUpdate(const FrameHeader& header, const uint8_t* payload, Frame* frame) {
  if (header.length != 4) {
    return ConnectionError(ErrorCode::kFrameSizeError, "WINDOW_UPDATE: length must be 4");
  }
  frame->window_increment = ReadU31(payload);
  if (frame->window_increment == 0) {
    // RFC 9113 §6.9: the scope follows the frame's: the connection window or one stream's.
    if (header.stream_id == 0) {
      return ConnectionError(ErrorCode::kProtocolError, "WINDOW_UPDATE: zero increment");
    }
    return StreamError(header.stream_id, ErrorCode::kProtocolError,
                       "WINDOW_UPDATE: zero increment");
  }
  return Ok();
}

DecodeStatus DecodeContinuation(const FrameHeader& header, const uint8_t* payload, Frame* frame) {
  if (header.stream_id == 0) {
    return ConnectionError(ErrorCode::kProtocolError, "CONTINUATION: stream id 0");
  }
  frame->payload = {payload, header.length};
  return Ok();
}

// Clears what a previous decode into the same Frame left behind. The settings vector keeps its
// capacity, so a connection decoding into one Frame allocates only for its largest SETTINGS.
void Reset(const FrameHeader& header, Frame* frame) {
  frame->header = header;
  frame->payload = {};
  frame->has_priority = false;
  frame->priority = PriorityFields();
  frame->error_code = ErrorCode::kNoError;
  frame->last_stream_id = 0;
  frame->debug_data = {};
  frame->window_increment = 0;
  frame->ping_data = {};
  frame->settings.clear();
  frame->promised_stream_id = 0;
}

}  // namespace

std::string_view FrameTypeName(uint8_t type) {
  switch (static_cast<FrameType>(type)) {
    case FrameType::kData:
      return "DATA";
    case FrameType::kHeaders:
      return "HEADERS";
    case FrameType::kPriority:
      return "PRIORITY";
    case FrameType::kRstStream:
      return "RST_STREAM";
    case FrameType::kSettings:
      return "SETTINGS";
    case FrameType::kPushPromise:
      return "PUSH_PROMISE";
    case FrameType::kPing:
      return "PING";
    case FrameType::kGoaway:
      return "GOAWAY";
    case FrameType::kWindowUpdate:
      return "WINDOW_UPDATE";
    case FrameType::kContinuation:
      return "CONTINUATION";
  }
  return "UNKNOWN";
}

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNoError:
      return "NO_ERROR";
    case ErrorCode::kProtocolError:
      return "PROTOCOL_ERROR";
    case ErrorCode::kInternalError:
      return "INTERNAL_ERROR";
    case ErrorCode::kFlowControlError:
      return "FLOW_CONTROL_ERROR";
    case ErrorCode::kSettingsTimeout:
      return "SETTINGS_TIMEOUT";
    case ErrorCode::kStreamClosed:
      return "STREAM_CLOSED";
    case ErrorCode::kFrameSizeError:
      return "FRAME_SIZE_ERROR";
    case ErrorCode::kRefusedStream:
      return "REFUSED_STREAM";
    case ErrorCode::kCancel:
      return "CANCEL";
    case ErrorCode::kCompressionError:
      return "COMPRESSION_ERROR";
    case ErrorCode::kConnectError:
      return "CONNECT_ERROR";
    case ErrorCode::kEnhanceYourCalm:
      return "ENHANCE_YOUR_CALM";
    case ErrorCode::kInadequateSecurity:
      return "INADEQUATE_SECURITY";
    case ErrorCode::kHttp11Required:
      return "HTTP_1_1_REQUIRED";
  }
  return "UNKNOWN";
}

DecodeStatus DecodeFrame(std::span<const uint8_t> bytes, uint32_t max_frame_size, Frame* frame,
                         size_t* consumed) {
  if (bytes.size() < kFrameHeaderSize) return DecodeStatus{DecodeResult::kNeedMore, Http2Error()};
  const FrameHeader header = ReadFrameHeader(bytes.data());
  // Checked before waiting for the payload: a peer must not make us buffer more than we allow.
  if (header.length > max_frame_size) {
    return ConnectionError(ErrorCode::kFrameSizeError, "frame larger than SETTINGS_MAX_FRAME_SIZE");
  }
  const size_t frame_size = kFrameHeaderSize + header.length;
  if (bytes.size() < frame_size) return DecodeStatus{DecodeResult::kNeedMore, Http2Error()};

  // Set for errors too: after a stream error the connection skips the frame and goes on.
  *consumed = frame_size;
  Reset(header, frame);
  const uint8_t* payload = bytes.data() + kFrameHeaderSize;
  switch (static_cast<FrameType>(header.type)) {
    case FrameType::kData:
      return DecodeData(header, payload, frame);
    case FrameType::kHeaders:
      return DecodeHeaders(header, payload, frame);
    case FrameType::kPriority:
      return DecodePriority(header, payload, frame);
    case FrameType::kRstStream:
      return DecodeRstStream(header, payload, frame);
    case FrameType::kSettings:
      return DecodeSettings(header, payload, frame);
    case FrameType::kPushPromise:
      return DecodePushPromise(header, payload, frame);
    case FrameType::kPing:
      return DecodePing(header, payload, frame);
    case FrameType::kGoaway:
      return DecodeGoaway(header, payload, frame);
    case FrameType::kWindowUpdate:
      return DecodeWindowUpdate(header, payload, frame);
    case FrameType::kContinuation:
      return DecodeContinuation(header, payload, frame);
  }
  // Extension frame types (RFC 9113 §5.5): the caller ignores what it does not know.
  frame->payload = {payload, header.length};
  return Ok();
}

void AppendSettings(std::span<const Setting> settings, std::string* out) {
  const size_t length = 6 * settings.size();
  uint8_t* p = Extend(out, kFrameHeaderSize + length);
  WriteFrameHeader(p, static_cast<uint32_t>(length), FrameType::kSettings, 0, 0);
  p += kFrameHeaderSize;
  for (const Setting& setting : settings) {
    PutU16(p, setting.id);
    PutU32(p + 2, setting.value);
    p += 6;
  }
}

void AppendSettingsAck(std::string* out) {
  WriteFrameHeader(Extend(out, kFrameHeaderSize), 0, FrameType::kSettings, flags::kAck, 0);
}

void AppendPing(const std::array<uint8_t, 8>& data, bool ack, std::string* out) {
  uint8_t* p = Extend(out, kFrameHeaderSize + 8);
  WriteFrameHeader(p, 8, FrameType::kPing, ack ? flags::kAck : 0, 0);
  std::memcpy(p + kFrameHeaderSize, data.data(), 8);
}

void AppendGoaway(uint32_t last_stream_id, ErrorCode code, std::string_view debug,
                  std::string* out) {
  const size_t length = 8 + debug.size();
  uint8_t* p = Extend(out, kFrameHeaderSize + length);
  WriteFrameHeader(p, static_cast<uint32_t>(length), FrameType::kGoaway, 0, 0);
  PutU32(p + kFrameHeaderSize, last_stream_id & kMaxStreamId);
  PutU32(p + kFrameHeaderSize + 4, static_cast<uint32_t>(code));
  Copy(p + kFrameHeaderSize + 8, debug.data(), debug.size());
}

void AppendRstStream(uint32_t stream_id, ErrorCode code, std::string* out) {
  uint8_t* p = Extend(out, kFrameHeaderSize + 4);
  WriteFrameHeader(p, 4, FrameType::kRstStream, 0, stream_id);
  PutU32(p + kFrameHeaderSize, static_cast<uint32_t>(code));
}

void AppendWindowUpdate(uint32_t stream_id, uint32_t increment, std::string* out) {
  uint8_t* p = Extend(out, kFrameHeaderSize + 4);
  WriteFrameHeader(p, 4, FrameType::kWindowUpdate, 0, stream_id);
  PutU32(p + kFrameHeaderSize, increment & kMaxStreamId);
}

void AppendPriority(uint32_t stream_id, const PriorityFields& priority, std::string* out) {
  uint8_t* p = Extend(out, kFrameHeaderSize + 5);
  WriteFrameHeader(p, 5, FrameType::kPriority, 0, stream_id);
  PutU32(p + kFrameHeaderSize,
         (priority.dependency & kMaxStreamId) | (priority.exclusive ? 0x80000000u : 0));
  p[kFrameHeaderSize + 4] = priority.weight;
}

void AppendData(uint32_t stream_id, std::span<const uint8_t> data, bool end_stream,
                std::string* out) {
  uint8_t* p = Extend(out, kFrameHeaderSize + data.size());
  WriteFrameHeader(p, static_cast<uint32_t>(data.size()), FrameType::kData,
                   end_stream ? flags::kEndStream : 0, stream_id);
  Copy(p + kFrameHeaderSize, data.data(), data.size());
}

void AppendHeaders(uint32_t stream_id, std::span<const uint8_t> block, bool end_stream,
                   uint32_t max_frame_size, std::string* out) {
  // A zero limit would never make progress, and a frame length has 24 bits.
  const size_t chunk = std::clamp<uint32_t>(max_frame_size, 1, kMaxMaxFrameSize);
  const size_t frames = std::max<size_t>(1, (block.size() + chunk - 1) / chunk);
  out->reserve(out->size() + frames * kFrameHeaderSize + block.size());

  // END_STREAM goes on the HEADERS frame (CONTINUATION has no such flag), END_HEADERS on the last.
  FrameType type = FrameType::kHeaders;
  uint8_t frame_flags = end_stream ? flags::kEndStream : 0;
  size_t offset = 0;
  do {
    const size_t n = std::min(chunk, block.size() - offset);
    const bool last = offset + n == block.size();
    uint8_t* p = Extend(out, kFrameHeaderSize + n);
    WriteFrameHeader(p, static_cast<uint32_t>(n), type,
                     frame_flags | (last ? flags::kEndHeaders : 0), stream_id);
    Copy(p + kFrameHeaderSize, block.data() + offset, n);
    offset += n;
    type = FrameType::kContinuation;
    frame_flags = 0;
  } while (offset < block.size());
}

}  // namespace sluice::http2
