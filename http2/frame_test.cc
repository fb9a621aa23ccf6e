#include "http2/frame.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::http2 {
namespace {

using ::testing::ElementsAre;
using std::string_literals::operator""s;

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string Text(std::span<const uint8_t> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// One raw frame, whatever its contents: the header says `payload.size()`.
std::string RawFrame(uint8_t type, uint8_t frame_flags, uint32_t stream_id,
                     std::string_view payload) {
  std::string out(kFrameHeaderSize, '\0');
  WriteFrameHeader(reinterpret_cast<uint8_t*>(out.data()), static_cast<uint32_t>(payload.size()),
                   static_cast<FrameType>(type), frame_flags, stream_id);
  out += payload;
  return out;
}

std::string RawFrame(FrameType type, uint8_t frame_flags, uint32_t stream_id,
                     std::string_view payload) {
  return RawFrame(static_cast<uint8_t>(type), frame_flags, stream_id, payload);
}

std::string U32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string SettingBytes(uint16_t id, uint32_t value) {
  return std::string{static_cast<char>(id >> 8), static_cast<char>(id)} + U32(value);
}

struct Decoded {
  DecodeStatus status;
  Frame frame;
  size_t consumed = 0;
};

// The decoded frame points into `bytes`: temporaries are refused.
Decoded Decode(std::string&& bytes, uint32_t max_frame_size = kMinMaxFrameSize) = delete;
Decoded Decode(const std::string& bytes, uint32_t max_frame_size = kMinMaxFrameSize) {
  Decoded d;
  d.status = DecodeFrame(Bytes(bytes), max_frame_size, &d.frame, &d.consumed);
  return d;
}

// Decodes a frame that must be valid and fill all of `bytes`.
Frame DecodeValid(std::string&& bytes, uint32_t max_frame_size = kMinMaxFrameSize) = delete;
Frame DecodeValid(const std::string& bytes, uint32_t max_frame_size = kMinMaxFrameSize) {
  Decoded d = Decode(bytes, max_frame_size);
  EXPECT_EQ(d.status.result, DecodeResult::kFrame) << d.status.error.debug();
  EXPECT_EQ(d.consumed, bytes.size());
  return std::move(d.frame);
}

void ExpectConnectionError(const std::string& bytes, ErrorCode code, std::string_view debug) {
  const Decoded d = Decode(bytes);
  ASSERT_EQ(d.status.result, DecodeResult::kError);
  EXPECT_TRUE(d.status.error.is_connection_error());
  EXPECT_EQ(d.status.error.code(), code)
      << ErrorCodeName(d.status.error.code()) << " instead of " << ErrorCodeName(code);
  EXPECT_EQ(d.status.error.debug(), debug);
}

void ExpectStreamError(const std::string& bytes, uint32_t stream_id, ErrorCode code,
                       std::string_view debug) {
  const Decoded d = Decode(bytes);
  ASSERT_EQ(d.status.result, DecodeResult::kError);
  EXPECT_FALSE(d.status.error.is_connection_error());
  EXPECT_EQ(d.status.error.stream_id(), stream_id);
  EXPECT_EQ(d.status.error.code(), code)
      << ErrorCodeName(d.status.error.code()) << " instead of " << ErrorCodeName(code);
  EXPECT_EQ(d.status.error.debug(), debug);
  // The connection resets the stream and goes on after the frame.
  EXPECT_EQ(d.consumed, bytes.size());
}

// --- names and the frame header ---

TEST(FrameTypeName, NamesEveryTypeAndUnknownExtensions) {
  EXPECT_EQ(FrameTypeName(0x0), "DATA");
  EXPECT_EQ(FrameTypeName(0x1), "HEADERS");
  EXPECT_EQ(FrameTypeName(0x2), "PRIORITY");
  EXPECT_EQ(FrameTypeName(0x3), "RST_STREAM");
  EXPECT_EQ(FrameTypeName(0x4), "SETTINGS");
  EXPECT_EQ(FrameTypeName(0x5), "PUSH_PROMISE");
  EXPECT_EQ(FrameTypeName(0x6), "PING");
  EXPECT_EQ(FrameTypeName(0x7), "GOAWAY");
  EXPECT_EQ(FrameTypeName(0x8), "WINDOW_UPDATE");
  EXPECT_EQ(FrameTypeName(0x9), "CONTINUATION");
  EXPECT_EQ(FrameTypeName(0xa), "UNKNOWN");
  EXPECT_EQ(FrameTypeName(0xff), "UNKNOWN");
}

TEST(ErrorCodeName, NamesEveryRfc9113CodeAndUnknownOnes) {
  EXPECT_EQ(ErrorCodeName(ErrorCode::kNoError), "NO_ERROR");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kProtocolError), "PROTOCOL_ERROR");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kInternalError), "INTERNAL_ERROR");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kFlowControlError), "FLOW_CONTROL_ERROR");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kSettingsTimeout), "SETTINGS_TIMEOUT");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kStreamClosed), "STREAM_CLOSED");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kFrameSizeError), "FRAME_SIZE_ERROR");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kRefusedStream), "REFUSED_STREAM");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kCancel), "CANCEL");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kCompressionError), "COMPRESSION_ERROR");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kConnectError), "CONNECT_ERROR");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kEnhanceYourCalm), "ENHANCE_YOUR_CALM");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kInadequateSecurity), "INADEQUATE_SECURITY");
  EXPECT_EQ(ErrorCodeName(ErrorCode::kHttp11Required), "HTTP_1_1_REQUIRED");
  EXPECT_EQ(ErrorCodeName(static_cast<ErrorCode>(0xe)), "UNKNOWN");
  EXPECT_EQ(ErrorCodeName(static_cast<ErrorCode>(0xffffffff)), "UNKNOWN");
}

TEST(FrameHeader, WritesAndReadsAllFieldsBigEndian) {
  std::array<uint8_t, kFrameHeaderSize> bytes{};
  WriteFrameHeader(bytes.data(), 0xabcdef, FrameType::kHeaders, 0x25, 0x12345678);
  EXPECT_THAT(bytes, ElementsAre(0xab, 0xcd, 0xef, 0x01, 0x25, 0x12, 0x34, 0x56, 0x78));
  const FrameHeader header = ReadFrameHeader(bytes.data());
  EXPECT_EQ(header.length, 0xabcdefu);
  EXPECT_EQ(header.type, 0x01);
  EXPECT_EQ(header.flags, 0x25);
  EXPECT_EQ(header.stream_id, 0x12345678u);
}

TEST(FrameHeader, WriteClearsReservedBit) {
  std::array<uint8_t, kFrameHeaderSize> bytes{};
  WriteFrameHeader(bytes.data(), 0, FrameType::kData, 0, 0x80000001);
  EXPECT_EQ(bytes[5], 0x00);
  EXPECT_EQ(bytes[8], 0x01);
}

TEST(FrameHeader, ReadIgnoresReservedBit) {
  const std::array<uint8_t, kFrameHeaderSize> bytes = {0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
  EXPECT_EQ(ReadFrameHeader(bytes.data()).stream_id, kMaxStreamId);
}

// --- kNeedMore ---

// One valid frame of each type and shape, from the serializers where there is one.
std::vector<std::string> ValidFrames() {
  std::vector<std::string> frames;
  const std::string block = "\x82\x86\x84\x41\x0fwww.example.com";
  const Setting settings[] = {{1, 4096}, {3, 100}, {4, 1 << 20}, {0x99, 7}};
  frames.emplace_back();
  AppendSettings(settings, &frames.back());
  frames.emplace_back();
  AppendSettingsAck(&frames.back());
  frames.emplace_back();
  AppendPing({1, 2, 3, 4, 5, 6, 7, 8}, false, &frames.back());
  frames.emplace_back();
  AppendGoaway(7, ErrorCode::kEnhanceYourCalm, "PING: flood", &frames.back());
  frames.emplace_back();
  AppendRstStream(3, ErrorCode::kCancel, &frames.back());
  frames.emplace_back();
  AppendWindowUpdate(0, 1000, &frames.back());
  frames.emplace_back();
  AppendPriority(5, {.dependency = 3, .exclusive = true, .weight = 200}, &frames.back());
  frames.emplace_back();
  AppendData(1, Bytes("hello"), true, &frames.back());
  frames.emplace_back();
  AppendHeaders(1, Bytes(block), false, kMinMaxFrameSize, &frames.back());
  frames.push_back(RawFrame(FrameType::kData, flags::kPadded, 1, "\003abc\0\0\0"s));
  frames.push_back(RawFrame(FrameType::kHeaders, flags::kPadded | flags::kPriority, 3,
                            std::string("\x02", 1) + U32(1) + "\x0f" + block + "xx"));
  frames.push_back(RawFrame(FrameType::kPushPromise, flags::kEndHeaders, 1, U32(2) + block));
  frames.push_back(RawFrame(FrameType::kContinuation, flags::kEndHeaders, 1, block));
  frames.push_back(RawFrame(0x21, 0xff, 9, "extension"));
  return frames;
}

TEST(DecodeFrame, NeedsMoreAtEveryTruncationPointOfEveryFrameType) {
  for (const std::string& bytes : ValidFrames()) {
    for (size_t size = 0; size < bytes.size(); ++size) {
      Frame frame;
      frame.header.type = 0xee;  // must stay untouched
      size_t consumed = 12345;
      const DecodeStatus s = DecodeFrame(Bytes(std::string_view(bytes).substr(0, size)),
                                         kMinMaxFrameSize, &frame, &consumed);
      EXPECT_EQ(s.result, DecodeResult::kNeedMore)
          << FrameTypeName(static_cast<uint8_t>(bytes[3])) << " cut at " << size;
      EXPECT_EQ(frame.header.type, 0xee);
      EXPECT_EQ(consumed, 12345u);
    }
    EXPECT_EQ(Decode(bytes).status.result, DecodeResult::kFrame)
        << FrameTypeName(static_cast<uint8_t>(bytes[3]));
  }
}

TEST(DecodeFrame, ConsumesOnlyTheFirstFrame) {
  std::string bytes;
  AppendPing({}, false, &bytes);
  AppendSettingsAck(&bytes);
  Decoded d = Decode(bytes);
  ASSERT_EQ(d.status.result, DecodeResult::kFrame);
  EXPECT_EQ(d.frame.type(), FrameType::kPing);
  EXPECT_EQ(d.consumed, kFrameHeaderSize + 8);
}

TEST(DecodeFrame, DecodesPrefaceSettingsAndHeadersInSequence) {
  std::string bytes(kClientPreface);
  AppendSettings(std::vector<Setting>{{4, 1 << 30}}, &bytes);
  AppendWindowUpdate(0, 1 << 30, &bytes);
  AppendHeaders(1, Bytes("\x82\x84\x87"), true, kMinMaxFrameSize, &bytes);
  std::span<const uint8_t> rest = Bytes(bytes).subspan(kClientPreface.size());
  std::vector<FrameType> types;
  Frame frame;
  while (!rest.empty()) {
    size_t consumed = 0;
    ASSERT_EQ(DecodeFrame(rest, kMinMaxFrameSize, &frame, &consumed).result, DecodeResult::kFrame);
    types.push_back(frame.type());
    rest = rest.subspan(consumed);
  }
  EXPECT_THAT(types,
              ElementsAre(FrameType::kSettings, FrameType::kWindowUpdate, FrameType::kHeaders));
  EXPECT_TRUE(frame.has_flag(flags::kEndStream));
  EXPECT_TRUE(frame.has_flag(flags::kEndHeaders));
  EXPECT_EQ(Text(frame.payload), "\x82\x84\x87");
}

// --- frame size ---

TEST(DecodeFrame, RejectsFrameLargerThanMaxFrameSizeAsSoonAsHeaderArrives) {
  const std::string header =
      RawFrame(FrameType::kData, 0, 1, std::string(kMinMaxFrameSize + 1, 'x'))
          .substr(0, kFrameHeaderSize);
  ExpectConnectionError(header, ErrorCode::kFrameSizeError,
                        "frame larger than SETTINGS_MAX_FRAME_SIZE");
}

TEST(DecodeFrame, AcceptsFrameOfExactlyMaxFrameSize) {
  const std::string bytes = RawFrame(FrameType::kData, 0, 1, std::string(100, 'x'));
  EXPECT_EQ(DecodeValid(bytes, 100).payload.size(), 100u);
  EXPECT_EQ(Decode(bytes, 99).status.result, DecodeResult::kError);
}

TEST(DecodeFrame, AppliesMaxFrameSizeToEveryType) {
  const std::string bytes = RawFrame(FrameType::kSettings, 0, 0, std::string(12, '\0'));
  const Decoded d = Decode(bytes, 11);
  ASSERT_EQ(d.status.result, DecodeResult::kError);
  EXPECT_EQ(d.status.error.code(), ErrorCode::kFrameSizeError);
  EXPECT_TRUE(d.status.error.is_connection_error());
}

// --- DATA ---

TEST(DecodeFrame, RoundTripsData) {
  std::string bytes;
  AppendData(3, Bytes("body bytes"), true, &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.type(), FrameType::kData);
  EXPECT_EQ(frame.header.stream_id, 3u);
  EXPECT_TRUE(frame.has_flag(flags::kEndStream));
  EXPECT_EQ(Text(frame.payload), "body bytes");
}

TEST(DecodeFrame, RoundTripsEmptyDataWithoutEndStream) {
  std::string bytes;
  AppendData(5, {}, false, &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.header.flags, 0);
  EXPECT_TRUE(frame.payload.empty());
}

TEST(DecodeFrame, StripsDataPadding) {
  const std::string bytes = RawFrame(FrameType::kData, flags::kPadded, 1, "\004data\0\0\0\0"s);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(Text(frame.payload), "data");
}

TEST(DecodeFrame, AcceptsDataPaddingFillingAllButPadLength) {
  const std::string bytes = RawFrame(FrameType::kData, flags::kPadded, 1, "\003\0\0\0"s);
  const Frame frame = DecodeValid(bytes);
  EXPECT_TRUE(frame.payload.empty());
}

TEST(DecodeFrame, RejectsDataOnStreamZero) {
  ExpectConnectionError(RawFrame(FrameType::kData, 0, 0, "x"), ErrorCode::kProtocolError,
                        "DATA: stream id 0");
}

TEST(DecodeFrame, RejectsPaddedDataWithoutRoomForPadLength) {
  ExpectConnectionError(RawFrame(FrameType::kData, flags::kPadded, 1, ""),
                        ErrorCode::kFrameSizeError, "DATA: no room for pad length");
}

TEST(DecodeFrame, RejectsDataPaddingAsLongAsPayload) {
  ExpectConnectionError(RawFrame(FrameType::kData, flags::kPadded, 1, "\004\0\0\0"s),
                        ErrorCode::kProtocolError, "DATA: padding exceeds payload");
}

TEST(DecodeFrame, RejectsDataPaddingLongerThanPayload) {
  ExpectConnectionError(RawFrame(FrameType::kData, flags::kPadded, 1, "\377abc"),
                        ErrorCode::kProtocolError, "DATA: padding exceeds payload");
}

// --- HEADERS and CONTINUATION ---

TEST(DecodeFrame, RoundTripsHeadersInOneFrame) {
  std::string bytes;
  AppendHeaders(7, Bytes("block"), true, kMinMaxFrameSize, &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.type(), FrameType::kHeaders);
  EXPECT_EQ(frame.header.stream_id, 7u);
  EXPECT_EQ(frame.header.flags, flags::kEndStream | flags::kEndHeaders);
  EXPECT_FALSE(frame.has_priority);
  EXPECT_EQ(Text(frame.payload), "block");
}

TEST(DecodeFrame, RoundTripsEmptyHeaderBlockAsOneHeadersFrame) {
  std::string bytes;
  AppendHeaders(1, {}, false, kMinMaxFrameSize, &bytes);
  EXPECT_EQ(bytes.size(), kFrameHeaderSize);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.header.flags, flags::kEndHeaders);
}

// Decodes every frame of `bytes`, which must all be valid.
std::vector<Frame> DecodeAll(std::string_view bytes, uint32_t max_frame_size) {
  std::vector<Frame> frames;
  std::span<const uint8_t> rest = Bytes(bytes);
  while (!rest.empty()) {
    Frame frame;
    size_t consumed = 0;
    const DecodeStatus s = DecodeFrame(rest, max_frame_size, &frame, &consumed);
    EXPECT_EQ(s.result, DecodeResult::kFrame) << s.error.debug();
    if (s.result != DecodeResult::kFrame) break;
    frames.push_back(std::move(frame));
    rest = rest.subspan(consumed);
  }
  return frames;
}

TEST(AppendHeaders, SplitsBlockIntoContinuationsAtMaxFrameSize) {
  std::string block;
  for (int i = 0; i < 3 * 100 + 1; ++i) block += static_cast<char>('a' + i % 26);
  std::string bytes;
  AppendHeaders(9, Bytes(block), true, 100, &bytes);
  const std::vector<Frame> frames = DecodeAll(bytes, 100);
  ASSERT_EQ(frames.size(), 4u);
  EXPECT_EQ(frames[0].type(), FrameType::kHeaders);
  EXPECT_EQ(frames[0].header.flags, flags::kEndStream);
  std::string joined;
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(frames[i].header.stream_id, 9u);
    if (i > 0) {
      EXPECT_EQ(frames[i].type(), FrameType::kContinuation);
    }
    if (i > 0 && i < 3) {
      EXPECT_EQ(frames[i].header.flags, 0);
    }
    joined += Text(frames[i].payload);
  }
  EXPECT_EQ(frames[3].header.flags, flags::kEndHeaders);
  EXPECT_EQ(frames[3].payload.size(), 1u);
  EXPECT_EQ(joined, block);
}

TEST(AppendHeaders, FillsLastFrameExactlyWithoutEmptyContinuation) {
  const std::string block(2 * kMinMaxFrameSize, 'h');
  std::string bytes;
  AppendHeaders(1, Bytes(block), false, kMinMaxFrameSize, &bytes);
  const std::vector<Frame> frames = DecodeAll(bytes, kMinMaxFrameSize);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].header.length, kMinMaxFrameSize);
  EXPECT_EQ(frames[0].header.flags, 0);
  EXPECT_EQ(frames[1].type(), FrameType::kContinuation);
  EXPECT_EQ(frames[1].header.length, kMinMaxFrameSize);
  EXPECT_EQ(frames[1].header.flags, flags::kEndHeaders);
}

TEST(AppendHeaders, AppendsToWhatIsAlreadyThere) {
  std::string bytes = "before";
  AppendHeaders(1, Bytes("xy"), false, kMinMaxFrameSize, &bytes);
  EXPECT_EQ(bytes.substr(0, 6), "before");
  const std::string frame_bytes = bytes.substr(6);
  EXPECT_EQ(Text(DecodeValid(frame_bytes).payload), "xy");
}

TEST(DecodeFrame, DecodesHeadersPriorityAndPadding) {
  const std::string bytes =
      RawFrame(FrameType::kHeaders, flags::kPadded | flags::kPriority | flags::kEndHeaders, 5,
               std::string("\x03", 1) + U32(0x80000003) + "\x10" + "block" + "pad");
  const Frame frame = DecodeValid(bytes);
  ASSERT_TRUE(frame.has_priority);
  EXPECT_TRUE(frame.priority.exclusive);
  EXPECT_EQ(frame.priority.dependency, 3u);
  EXPECT_EQ(frame.priority.weight, 0x10);
  EXPECT_EQ(Text(frame.payload), "block");
}

TEST(DecodeFrame, AcceptsHeadersWithPriorityAndEmptyFragment) {
  const std::string bytes = RawFrame(FrameType::kHeaders, flags::kPriority, 5, U32(0) + "\x00"s);
  const Frame frame = DecodeValid(bytes);
  EXPECT_TRUE(frame.has_priority);
  EXPECT_TRUE(frame.payload.empty());
}

TEST(DecodeFrame, RejectsHeadersOnStreamZero) {
  ExpectConnectionError(RawFrame(FrameType::kHeaders, flags::kEndHeaders, 0, "\x82"),
                        ErrorCode::kProtocolError, "HEADERS: stream id 0");
}

TEST(DecodeFrame, RejectsPaddedHeadersWithoutRoomForPadLength) {
  ExpectConnectionError(RawFrame(FrameType::kHeaders, flags::kPadded, 1, ""),
                        ErrorCode::kFrameSizeError, "HEADERS: no room for pad length");
}

TEST(DecodeFrame, RejectsHeadersTooShortForPriority) {
  ExpectConnectionError(RawFrame(FrameType::kHeaders, flags::kPriority, 1, "\0\0\0\0"s),
                        ErrorCode::kFrameSizeError, "HEADERS: too short for priority");
}

TEST(DecodeFrame, RejectsPaddedHeadersTooShortForPriority) {
  ExpectConnectionError(
      RawFrame(FrameType::kHeaders, flags::kPadded | flags::kPriority, 1, std::string(5, '\0')),
      ErrorCode::kFrameSizeError, "HEADERS: too short for priority");
}

TEST(DecodeFrame, RejectsHeadersPaddingExceedingFragment) {
  ExpectConnectionError(RawFrame(FrameType::kHeaders, flags::kPadded, 1, "\003ab"),
                        ErrorCode::kProtocolError, "HEADERS: padding exceeds payload");
}

TEST(DecodeFrame, RejectsHeadersPaddingOverlappingPriority) {
  ExpectConnectionError(RawFrame(FrameType::kHeaders, flags::kPadded | flags::kPriority, 1,
                                 std::string("\x01", 1) + U32(0) + "\x00"s),
                        ErrorCode::kProtocolError, "HEADERS: padding exceeds payload");
}

TEST(DecodeFrame, RejectsHeadersDependingOnItsOwnStreamAsStreamError) {
  ExpectStreamError(RawFrame(FrameType::kHeaders, flags::kPriority, 3, U32(3) + "\0blk"s), 3,
                    ErrorCode::kProtocolError, "HEADERS: stream depends on itself");
}

TEST(DecodeFrame, KeepsHeaderBlockOfSelfDependentHeadersForHpack) {
  const std::string bytes = RawFrame(FrameType::kHeaders, flags::kPriority, 3, U32(3) + "\0blk"s);
  // The connection must still decode the fragment, or its HPACK table falls out of step.
  const Decoded d = Decode(bytes);
  ASSERT_EQ(d.status.result, DecodeResult::kError);
  EXPECT_EQ(Text(d.frame.payload), "blk");
}

TEST(DecodeFrame, DecodesContinuation) {
  const std::string bytes = RawFrame(FrameType::kContinuation, flags::kEndHeaders, 3, "frag");
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.type(), FrameType::kContinuation);
  EXPECT_EQ(Text(frame.payload), "frag");
}

TEST(DecodeFrame, RejectsContinuationOnStreamZero) {
  ExpectConnectionError(RawFrame(FrameType::kContinuation, 0, 0, "x"), ErrorCode::kProtocolError,
                        "CONTINUATION: stream id 0");
}

// --- PRIORITY ---

TEST(DecodeFrame, RoundTripsPriority) {
  std::string bytes;
  AppendPriority(7, {.dependency = kMaxStreamId, .exclusive = true, .weight = 255}, &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.type(), FrameType::kPriority);
  EXPECT_EQ(frame.header.stream_id, 7u);
  ASSERT_TRUE(frame.has_priority);
  EXPECT_EQ(frame.priority.dependency, kMaxStreamId);
  EXPECT_TRUE(frame.priority.exclusive);
  EXPECT_EQ(frame.priority.weight, 255);
}

TEST(DecodeFrame, RoundTripsNonExclusivePriority) {
  std::string bytes;
  AppendPriority(7, {.dependency = 0, .exclusive = false, .weight = 15}, &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_FALSE(frame.priority.exclusive);
  EXPECT_EQ(frame.priority.dependency, 0u);
  EXPECT_EQ(frame.priority.weight, 15);
}

TEST(DecodeFrame, RejectsPriorityOnStreamZero) {
  ExpectConnectionError(RawFrame(FrameType::kPriority, 0, 0, U32(1) + "\x10"),
                        ErrorCode::kProtocolError, "PRIORITY: stream id 0");
}

TEST(DecodeFrame, RejectsShortPriorityAsStreamFrameSizeError) {
  ExpectStreamError(RawFrame(FrameType::kPriority, 0, 5, U32(1)), 5, ErrorCode::kFrameSizeError,
                    "PRIORITY: length must be 5");
}

TEST(DecodeFrame, RejectsLongPriorityAsStreamFrameSizeError) {
  ExpectStreamError(RawFrame(FrameType::kPriority, 0, 5, U32(1) + "\x10\x00"s), 5,
                    ErrorCode::kFrameSizeError, "PRIORITY: length must be 5");
}

TEST(DecodeFrame, RejectsPriorityDependingOnItsOwnStreamAsStreamError) {
  ExpectStreamError(RawFrame(FrameType::kPriority, 0, 9, U32(0x80000009) + "\x10"), 9,
                    ErrorCode::kProtocolError, "PRIORITY: stream depends on itself");
}

// --- RST_STREAM ---

TEST(DecodeFrame, RoundTripsRstStream) {
  std::string bytes;
  AppendRstStream(11, ErrorCode::kRefusedStream, &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.type(), FrameType::kRstStream);
  EXPECT_EQ(frame.header.stream_id, 11u);
  EXPECT_EQ(frame.error_code, ErrorCode::kRefusedStream);
}

TEST(DecodeFrame, KeepsUnknownErrorCodeOfRstStream) {
  const std::string bytes = RawFrame(FrameType::kRstStream, 0, 1, U32(0xdeadbeef));
  EXPECT_EQ(static_cast<uint32_t>(DecodeValid(bytes).error_code), 0xdeadbeefu);
}

TEST(DecodeFrame, RejectsRstStreamOnStreamZero) {
  ExpectConnectionError(RawFrame(FrameType::kRstStream, 0, 0, U32(8)), ErrorCode::kProtocolError,
                        "RST_STREAM: stream id 0");
}

TEST(DecodeFrame, RejectsRstStreamOfWrongLength) {
  ExpectConnectionError(RawFrame(FrameType::kRstStream, 0, 1, "\0\0\0"s),
                        ErrorCode::kFrameSizeError, "RST_STREAM: length must be 4");
  ExpectConnectionError(RawFrame(FrameType::kRstStream, 0, 1, U32(8) + "x"),
                        ErrorCode::kFrameSizeError, "RST_STREAM: length must be 4");
}

// --- SETTINGS ---

TEST(DecodeFrame, RoundTripsSettingsIncludingUnknownIds) {
  const Setting settings[] = {{1, 0xffffffff}, {2, 0}, {3, 0},   {4, kMaxWindowSize},
                              {5, 16384},      {6, 1}, {0x8, 1}, {0xffff, 42}};
  std::string bytes;
  AppendSettings(settings, &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.type(), FrameType::kSettings);
  EXPECT_EQ(frame.header.flags, 0);
  ASSERT_EQ(frame.settings.size(), std::size(settings));
  for (size_t i = 0; i < std::size(settings); ++i) {
    EXPECT_EQ(frame.settings[i].id, settings[i].id);
    EXPECT_EQ(frame.settings[i].value, settings[i].value);
  }
}

TEST(DecodeFrame, RoundTripsEmptySettings) {
  std::string bytes;
  AppendSettings({}, &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_FALSE(frame.has_flag(flags::kAck));
  EXPECT_TRUE(frame.settings.empty());
}

TEST(DecodeFrame, RoundTripsSettingsAck) {
  std::string bytes;
  AppendSettingsAck(&bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.type(), FrameType::kSettings);
  EXPECT_TRUE(frame.has_flag(flags::kAck));
  EXPECT_TRUE(frame.settings.empty());
}

TEST(DecodeFrame, AcceptsSettingsLimitValues) {
  const std::string bytes =
      RawFrame(FrameType::kSettings, 0, 0,
               SettingBytes(2, 1) + SettingBytes(4, 0) + SettingBytes(5, kMinMaxFrameSize) +
                   SettingBytes(5, kMaxMaxFrameSize));
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.settings.size(), 4u);
}

TEST(DecodeFrame, ReusesSettingsCapacityAndClearsOldSettings) {
  std::string three;
  AppendSettings(std::vector<Setting>{{1, 1}, {3, 3}, {4, 4}}, &three);
  std::string one;
  AppendSettings(std::vector<Setting>{{6, 6}}, &one);
  std::string ping;
  AppendPing({}, false, &ping);
  Frame frame;
  size_t consumed = 0;
  ASSERT_EQ(DecodeFrame(Bytes(three), kMinMaxFrameSize, &frame, &consumed).result,
            DecodeResult::kFrame);
  const Setting* storage = frame.settings.data();
  ASSERT_EQ(DecodeFrame(Bytes(one), kMinMaxFrameSize, &frame, &consumed).result,
            DecodeResult::kFrame);
  ASSERT_EQ(frame.settings.size(), 1u);
  EXPECT_EQ(frame.settings[0].id, 6);
  EXPECT_EQ(frame.settings.data(), storage);  // no new allocation
  ASSERT_EQ(DecodeFrame(Bytes(ping), kMinMaxFrameSize, &frame, &consumed).result,
            DecodeResult::kFrame);
  EXPECT_TRUE(frame.settings.empty());
}

TEST(DecodeFrame, RejectsSettingsOnNonZeroStream) {
  ExpectConnectionError(RawFrame(FrameType::kSettings, 0, 1, ""), ErrorCode::kProtocolError,
                        "SETTINGS: stream id not 0");
}

TEST(DecodeFrame, RejectsSettingsAckWithPayload) {
  ExpectConnectionError(RawFrame(FrameType::kSettings, flags::kAck, 0, SettingBytes(3, 1)),
                        ErrorCode::kFrameSizeError, "SETTINGS: ACK with payload");
}

TEST(DecodeFrame, RejectsSettingsLengthNotMultipleOfSix) {
  ExpectConnectionError(RawFrame(FrameType::kSettings, 0, 0, SettingBytes(3, 1) + "\0"s),
                        ErrorCode::kFrameSizeError, "SETTINGS: length not a multiple of 6");
  ExpectConnectionError(RawFrame(FrameType::kSettings, 0, 0, "\0\x03\0\0\0"s),
                        ErrorCode::kFrameSizeError, "SETTINGS: length not a multiple of 6");
}

TEST(DecodeFrame, RejectsSettingsEnablePushAboveOne) {
  ExpectConnectionError(RawFrame(FrameType::kSettings, 0, 0, SettingBytes(2, 2)),
                        ErrorCode::kProtocolError, "SETTINGS: invalid ENABLE_PUSH");
}

TEST(DecodeFrame, RejectsSettingsInitialWindowSizeAbove2To31Minus1) {
  ExpectConnectionError(RawFrame(FrameType::kSettings, 0, 0, SettingBytes(4, 0x80000000)),
                        ErrorCode::kFlowControlError, "SETTINGS: invalid INITIAL_WINDOW_SIZE");
}

TEST(DecodeFrame, RejectsSettingsMaxFrameSizeBelow2To14) {
  ExpectConnectionError(RawFrame(FrameType::kSettings, 0, 0, SettingBytes(5, kMinMaxFrameSize - 1)),
                        ErrorCode::kProtocolError, "SETTINGS: invalid MAX_FRAME_SIZE");
}

TEST(DecodeFrame, RejectsSettingsMaxFrameSizeAbove2To24Minus1) {
  ExpectConnectionError(RawFrame(FrameType::kSettings, 0, 0, SettingBytes(5, kMaxMaxFrameSize + 1)),
                        ErrorCode::kProtocolError, "SETTINGS: invalid MAX_FRAME_SIZE");
}

TEST(DecodeFrame, RejectsInvalidSettingAfterValidOnes) {
  ExpectConnectionError(
      RawFrame(FrameType::kSettings, 0, 0, SettingBytes(1, 0) + SettingBytes(5, 0)),
      ErrorCode::kProtocolError, "SETTINGS: invalid MAX_FRAME_SIZE");
}

// --- PUSH_PROMISE ---

TEST(DecodeFrame, DecodesPushPromise) {
  const std::string bytes =
      RawFrame(FrameType::kPushPromise, flags::kEndHeaders, 1, U32(0x80000002) + "block");
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.type(), FrameType::kPushPromise);
  EXPECT_EQ(frame.promised_stream_id, 2u);
  EXPECT_EQ(Text(frame.payload), "block");
}

TEST(DecodeFrame, StripsPushPromisePadding) {
  const std::string bytes = RawFrame(FrameType::kPushPromise, flags::kPadded, 1,
                                     std::string("\x02", 1) + U32(4) + "blk" + "\0\0"s);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.promised_stream_id, 4u);
  EXPECT_EQ(Text(frame.payload), "blk");
}

TEST(DecodeFrame, RejectsPushPromiseOnStreamZero) {
  ExpectConnectionError(RawFrame(FrameType::kPushPromise, 0, 0, U32(2)), ErrorCode::kProtocolError,
                        "PUSH_PROMISE: stream id 0");
}

TEST(DecodeFrame, RejectsPaddedPushPromiseWithoutRoomForPadLength) {
  ExpectConnectionError(RawFrame(FrameType::kPushPromise, flags::kPadded, 1, ""),
                        ErrorCode::kFrameSizeError, "PUSH_PROMISE: no room for pad length");
}

TEST(DecodeFrame, RejectsPushPromiseTooShortForPromisedStreamId) {
  ExpectConnectionError(RawFrame(FrameType::kPushPromise, 0, 1, "\0\0\0"s),
                        ErrorCode::kFrameSizeError,
                        "PUSH_PROMISE: too short for promised stream id");
  ExpectConnectionError(RawFrame(FrameType::kPushPromise, flags::kPadded, 1, "\0\0\0\0"s),
                        ErrorCode::kFrameSizeError,
                        "PUSH_PROMISE: too short for promised stream id");
}

TEST(DecodeFrame, RejectsPushPromisePaddingExceedingFragment) {
  ExpectConnectionError(
      RawFrame(FrameType::kPushPromise, flags::kPadded, 1, std::string("\x02", 1) + U32(2) + "x"),
      ErrorCode::kProtocolError, "PUSH_PROMISE: padding exceeds payload");
}

// --- PING ---

TEST(DecodeFrame, RoundTripsPing) {
  std::string bytes;
  AppendPing({8, 7, 6, 5, 4, 3, 2, 1}, false, &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.type(), FrameType::kPing);
  EXPECT_FALSE(frame.has_flag(flags::kAck));
  EXPECT_THAT(frame.ping_data, ElementsAre(8, 7, 6, 5, 4, 3, 2, 1));
}

TEST(DecodeFrame, RoundTripsPingAck) {
  std::string bytes;
  AppendPing({1, 1, 1, 1, 1, 1, 1, 1}, true, &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_TRUE(frame.has_flag(flags::kAck));
  EXPECT_THAT(frame.ping_data, ElementsAre(1, 1, 1, 1, 1, 1, 1, 1));
}

TEST(DecodeFrame, RejectsPingOnNonZeroStream) {
  ExpectConnectionError(RawFrame(FrameType::kPing, 0, 1, std::string(8, '\0')),
                        ErrorCode::kProtocolError, "PING: stream id not 0");
}

TEST(DecodeFrame, RejectsPingOfWrongLength) {
  ExpectConnectionError(RawFrame(FrameType::kPing, 0, 0, std::string(7, '\0')),
                        ErrorCode::kFrameSizeError, "PING: length must be 8");
  ExpectConnectionError(RawFrame(FrameType::kPing, flags::kAck, 0, std::string(9, '\0')),
                        ErrorCode::kFrameSizeError, "PING: length must be 8");
}

// --- GOAWAY ---

TEST(DecodeFrame, RoundTripsGoawayWithDebugData) {
  std::string bytes;
  AppendGoaway(kMaxStreamId, ErrorCode::kProtocolError, "SETTINGS: invalid MAX_FRAME_SIZE", &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.type(), FrameType::kGoaway);
  EXPECT_EQ(frame.last_stream_id, kMaxStreamId);
  EXPECT_EQ(frame.error_code, ErrorCode::kProtocolError);
  EXPECT_EQ(Text(frame.debug_data), "SETTINGS: invalid MAX_FRAME_SIZE");
}

TEST(DecodeFrame, RoundTripsGoawayWithoutDebugData) {
  std::string bytes;
  AppendGoaway(0, ErrorCode::kNoError, {}, &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.last_stream_id, 0u);
  EXPECT_EQ(frame.error_code, ErrorCode::kNoError);
  EXPECT_TRUE(frame.debug_data.empty());
}

TEST(DecodeFrame, IgnoresReservedBitOfGoawayLastStreamId) {
  const std::string bytes = RawFrame(FrameType::kGoaway, 0, 0, U32(0x80000005) + U32(0));
  EXPECT_EQ(DecodeValid(bytes).last_stream_id, 5u);
}

TEST(DecodeFrame, RejectsGoawayOnNonZeroStream) {
  ExpectConnectionError(RawFrame(FrameType::kGoaway, 0, 3, U32(0) + U32(0)),
                        ErrorCode::kProtocolError, "GOAWAY: stream id not 0");
}

TEST(DecodeFrame, RejectsGoawayShorterThanEight) {
  ExpectConnectionError(RawFrame(FrameType::kGoaway, 0, 0, std::string(7, '\0')),
                        ErrorCode::kFrameSizeError, "GOAWAY: length must be at least 8");
}

// --- WINDOW_UPDATE ---

TEST(DecodeFrame, RoundTripsConnectionWindowUpdate) {
  std::string bytes;
  AppendWindowUpdate(0, kMaxWindowSize, &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.type(), FrameType::kWindowUpdate);
  EXPECT_EQ(frame.header.stream_id, 0u);
  EXPECT_EQ(frame.window_increment, static_cast<uint32_t>(kMaxWindowSize));
}

TEST(DecodeFrame, RoundTripsStreamWindowUpdate) {
  std::string bytes;
  AppendWindowUpdate(13, 1, &bytes);
  const Frame frame = DecodeValid(bytes);
  EXPECT_EQ(frame.header.stream_id, 13u);
  EXPECT_EQ(frame.window_increment, 1u);
}

TEST(DecodeFrame, RejectsZeroWindowUpdateOnConnectionAsConnectionError) {
  ExpectConnectionError(RawFrame(FrameType::kWindowUpdate, 0, 0, U32(0)), ErrorCode::kProtocolError,
                        "WINDOW_UPDATE: zero increment");
}

TEST(DecodeFrame, RejectsZeroWindowUpdateOnStreamAsStreamError) {
  ExpectStreamError(RawFrame(FrameType::kWindowUpdate, 0, 5, U32(0)), 5, ErrorCode::kProtocolError,
                    "WINDOW_UPDATE: zero increment");
}

TEST(DecodeFrame, TreatsWindowUpdateWithOnlyReservedBitAsZero) {
  ExpectStreamError(RawFrame(FrameType::kWindowUpdate, 0, 5, U32(0x80000000)), 5,
                    ErrorCode::kProtocolError, "WINDOW_UPDATE: zero increment");
}

TEST(DecodeFrame, RejectsWindowUpdateOfWrongLength) {
  ExpectConnectionError(RawFrame(FrameType::kWindowUpdate, 0, 1, "\0\0\x01"s),
                        ErrorCode::kFrameSizeError, "WINDOW_UPDATE: length must be 4");
  ExpectConnectionError(RawFrame(FrameType::kWindowUpdate, 0, 0, U32(1) + "\0"s),
                        ErrorCode::kFrameSizeError, "WINDOW_UPDATE: length must be 4");
}

// --- extension frames ---

TEST(DecodeFrame, PassesUnknownFrameTypesThroughWithHeaderAndPayload) {
  for (uint32_t stream_id : {0u, 7u}) {
    const std::string bytes = RawFrame(0xfa, 0xff, stream_id, "opaque");
    const Frame frame = DecodeValid(bytes);
    EXPECT_EQ(frame.header.type, 0xfa);
    EXPECT_EQ(frame.header.flags, 0xff);
    EXPECT_EQ(frame.header.stream_id, stream_id);
    EXPECT_EQ(Text(frame.payload), "opaque");
  }
}

TEST(DecodeFrame, PassesEmptyUnknownFrameThrough) {
  const std::string bytes = RawFrame(0x0a, 0, 0, "");
  EXPECT_TRUE(DecodeValid(bytes).payload.empty());
}

TEST(DecodeFrame, ClearsFieldsOfPreviousFrame) {
  std::string goaway;
  AppendGoaway(3, ErrorCode::kCancel, "bye", &goaway);
  std::string data;
  AppendData(1, Bytes("d"), false, &data);
  Frame frame;
  size_t consumed = 0;
  ASSERT_EQ(DecodeFrame(Bytes(goaway), kMinMaxFrameSize, &frame, &consumed).result,
            DecodeResult::kFrame);
  ASSERT_EQ(DecodeFrame(Bytes(data), kMinMaxFrameSize, &frame, &consumed).result,
            DecodeResult::kFrame);
  EXPECT_EQ(frame.last_stream_id, 0u);
  EXPECT_EQ(frame.error_code, ErrorCode::kNoError);
  EXPECT_TRUE(frame.debug_data.empty());
  EXPECT_EQ(Text(frame.payload), "d");
}

}  // namespace
}  // namespace sluice::http2
