// Fuzzes DecodeFrame as a server connection drives it: skip the client preface if the input starts
// with it, then decode frame after frame until the bytes run out, a connection error, or kNeedMore.
//
// Input: byte 0 chooses SETTINGS_MAX_FRAME_SIZE (below 0x80: the default 16384, so valid frames
// decode; otherwise 0..127, so the size limit is hit at every length); the rest is the stream.
//
// Checked, besides "no crash, no sanitizer report":
// - kFrame consumes exactly 9 + length and no more than the input; the header matches
//   ReadFrameHeader; payload and debug data point inside the frame's payload;
// - kNeedMore only when the 9-byte header or the payload is incomplete, and truncating a decoded
//   frame anywhere gives kNeedMore without touching the output;
// - kError carries a known code, a debug string, and the scope and stream id its frame type allows;
//   a frame over the limit is a connection FRAME_SIZE_ERROR; after a stream error the connection
//   goes on after the frame;
// - re-encoding a decoded frame through its Append* serializer decodes to the same fields.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "http2/frame.h"

namespace sluice::http2 {
namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "frame_fuzz: invariant violated: %s\n", what);
  std::abort();
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

bool Inside(std::span<const uint8_t> part, std::span<const uint8_t> whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

bool SameBytes(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

// Decodes `bytes`, which one of our serializers wrote, as its first frame.
Frame DecodeOwn(const std::string& bytes, uint32_t max_frame_size) {
  Frame frame;
  size_t consumed = 0;
  const DecodeStatus s = DecodeFrame(Bytes(bytes), max_frame_size, &frame, &consumed);
  Check(s.result == DecodeResult::kFrame, "re-encoded frame does not decode");
  return frame;
}

// Re-encodes `frame` with the serializer for its type (if there is one) and checks it decodes to
// the same fields.
void CheckReencoding(const Frame& frame, uint32_t max_frame_size) {
  std::string again;
  const uint32_t id = frame.header.stream_id;
  switch (frame.type()) {
    case FrameType::kData: {
      AppendData(id, frame.payload, frame.has_flag(flags::kEndStream), &again);
      const Frame d = DecodeOwn(again, max_frame_size);
      Check(d.header.stream_id == id && SameBytes(d.payload, frame.payload) &&
                d.has_flag(flags::kEndStream) == frame.has_flag(flags::kEndStream),
            "DATA re-encoding differs");
      break;
    }
    case FrameType::kHeaders: {
      AppendHeaders(id, frame.payload, frame.has_flag(flags::kEndStream), max_frame_size, &again);
      const Frame d = DecodeOwn(again, max_frame_size);
      // The fragment fit one frame before, so it does again.
      Check(d.type() == FrameType::kHeaders && d.header.stream_id == id &&
                SameBytes(d.payload, frame.payload) && d.has_flag(flags::kEndHeaders) &&
                d.has_flag(flags::kEndStream) == frame.has_flag(flags::kEndStream) &&
                !d.has_priority,
            "HEADERS re-encoding differs");
      break;
    }
    case FrameType::kPriority: {
      AppendPriority(id, frame.priority, &again);
      const Frame d = DecodeOwn(again, max_frame_size);
      Check(d.has_priority && d.priority.dependency == frame.priority.dependency &&
                d.priority.exclusive == frame.priority.exclusive &&
                d.priority.weight == frame.priority.weight,
            "PRIORITY re-encoding differs");
      break;
    }
    case FrameType::kRstStream: {
      AppendRstStream(id, frame.error_code, &again);
      Check(DecodeOwn(again, max_frame_size).error_code == frame.error_code,
            "RST_STREAM re-encoding differs");
      break;
    }
    case FrameType::kSettings: {
      if (frame.has_flag(flags::kAck)) {
        AppendSettingsAck(&again);
      } else {
        AppendSettings(frame.settings, &again);
      }
      const Frame d = DecodeOwn(again, max_frame_size);
      Check(d.has_flag(flags::kAck) == frame.has_flag(flags::kAck) &&
                d.settings.size() == frame.settings.size(),
            "SETTINGS re-encoding differs");
      for (size_t i = 0; i < d.settings.size(); ++i) {
        Check(d.settings[i].id == frame.settings[i].id &&
                  d.settings[i].value == frame.settings[i].value,
              "SETTINGS re-encoding differs");
      }
      break;
    }
    case FrameType::kPing: {
      AppendPing(frame.ping_data, frame.has_flag(flags::kAck), &again);
      const Frame d = DecodeOwn(again, max_frame_size);
      Check(
          d.ping_data == frame.ping_data && d.has_flag(flags::kAck) == frame.has_flag(flags::kAck),
          "PING re-encoding differs");
      break;
    }
    case FrameType::kGoaway: {
      const std::string_view debug(reinterpret_cast<const char*>(frame.debug_data.data()),
                                   frame.debug_data.size());
      AppendGoaway(frame.last_stream_id, frame.error_code, debug, &again);
      const Frame d = DecodeOwn(again, max_frame_size);
      Check(d.last_stream_id == frame.last_stream_id && d.error_code == frame.error_code &&
                SameBytes(d.debug_data, frame.debug_data),
            "GOAWAY re-encoding differs");
      break;
    }
    case FrameType::kWindowUpdate: {
      AppendWindowUpdate(id, frame.window_increment, &again);
      Check(DecodeOwn(again, max_frame_size).window_increment == frame.window_increment,
            "WINDOW_UPDATE re-encoding differs");
      break;
    }
    case FrameType::kPushPromise:
    case FrameType::kContinuation:
      break;  // no serializer: a server sends neither on its own
  }
}

void CheckFrame(const Frame& frame, std::span<const uint8_t> bytes, size_t consumed,
                uint32_t max_frame_size) {
  const FrameHeader header = ReadFrameHeader(bytes.data());
  Check(consumed == kFrameHeaderSize + header.length, "consumed != 9 + length");
  Check(consumed <= bytes.size(), "consumed more than the input");
  Check(header.length <= max_frame_size, "accepted a frame over the limit");
  Check(frame.header.length == header.length && frame.header.type == header.type &&
            frame.header.flags == header.flags && frame.header.stream_id == header.stream_id,
        "header differs from ReadFrameHeader");
  const std::span<const uint8_t> payload = bytes.subspan(kFrameHeaderSize, header.length);
  Check(Inside(frame.payload, payload), "payload span outside the frame");
  Check(Inside(frame.debug_data, payload), "debug data span outside the frame");
  if (frame.type() == FrameType::kWindowUpdate)
    Check(frame.window_increment != 0, "zero increment");

  // Truncation anywhere (the interesting points) asks for more and leaves the output alone.
  for (size_t cut : {size_t{0}, kFrameHeaderSize - 1, kFrameHeaderSize, consumed - 1}) {
    if (cut >= consumed) continue;
    Frame untouched;
    untouched.header.type = 0xee;
    size_t unused = 12345;
    const DecodeStatus s = DecodeFrame(bytes.first(cut), max_frame_size, &untouched, &unused);
    Check(s.result == DecodeResult::kNeedMore, "truncated frame is not kNeedMore");
    Check(untouched.header.type == 0xee && unused == 12345, "kNeedMore wrote its outputs");
  }
  CheckReencoding(frame, max_frame_size);
}

// Returns false when the connection would stop reading (connection error).
bool CheckError(const DecodeStatus& s, std::span<const uint8_t> bytes, uint32_t max_frame_size) {
  const Http2Error& e = s.error;
  Check(!e.debug().empty(), "error without debug string");
  Check(e.code() == ErrorCode::kProtocolError || e.code() == ErrorCode::kFrameSizeError ||
            e.code() == ErrorCode::kFlowControlError,
        "undocumented error code");
  const FrameHeader header = ReadFrameHeader(bytes.data());
  if (header.length > max_frame_size) {
    Check(e.is_connection_error() && e.code() == ErrorCode::kFrameSizeError,
          "oversized frame is not a connection FRAME_SIZE_ERROR");
    return false;
  }
  Check(bytes.size() >= kFrameHeaderSize + header.length, "error before the frame was complete");
  if (e.is_connection_error()) return false;
  // Stream errors: PRIORITY (size, self-dependency), HEADERS (self-dependency), WINDOW_UPDATE (zero
  // increment) on a stream.
  const FrameType type = static_cast<FrameType>(header.type);
  Check(type == FrameType::kPriority || type == FrameType::kHeaders ||
            type == FrameType::kWindowUpdate,
        "stream error from a frame type that has none");
  Check(e.stream_id() == header.stream_id && e.stream_id() != 0, "stream error on wrong stream");
  return true;
}

void Run(std::span<const uint8_t> input, uint32_t max_frame_size) {
  const std::string_view preface = kClientPreface;
  if (input.size() >= preface.size() &&
      std::memcmp(input.data(), preface.data(), preface.size()) == 0) {
    input = input.subspan(preface.size());
  }
  // One Frame for the whole connection, as the connection will hold it.
  Frame frame;
  while (!input.empty()) {
    size_t consumed = 0;
    const DecodeStatus s = DecodeFrame(input, max_frame_size, &frame, &consumed);
    switch (s.result) {
      case DecodeResult::kNeedMore:
        Check(input.size() < kFrameHeaderSize ||
                  input.size() < kFrameHeaderSize + ReadFrameHeader(input.data()).length,
              "kNeedMore with a whole frame there");
        return;
      case DecodeResult::kError:
        if (!CheckError(s, input, max_frame_size)) return;
        Check(consumed == kFrameHeaderSize + ReadFrameHeader(input.data()).length,
              "stream error without the frame's size");
        break;
      case DecodeResult::kFrame:
        CheckFrame(frame, input, consumed, max_frame_size);
        break;
    }
    input = input.subspan(consumed);
  }
}

}  // namespace
}  // namespace sluice::http2

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint32_t max_frame_size =
      data[0] < 0x80 ? sluice::http2::kMinMaxFrameSize : data[0] - 0x80u;
  sluice::http2::Run({data + 1, size - 1}, max_frame_size);
  return 0;
}
