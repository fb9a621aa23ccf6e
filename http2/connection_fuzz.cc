// Fuzzes a whole HTTP/2 server connection in process (over core/memory_transport.h): the input is
// a program for a client that mixes valid frames (requests through a real HPACK encoder, bodies,
// trailers, window updates, resets, settings, pings, priorities, header blocks split over
// CONTINUATIONs), mutated frames (any type, flags, stream and length) and raw junk, delivered to
// the connection in pieces split where the program says. The server routes to handlers that
// answer inline, read and echo the body, stream a large answer, or throw.
//
// Byte 0 picks the output strategy (bits 0-1) and whether the client reads what the server sends
// (bit 2: a client that never reads makes the server's output back up). Then each op is one byte,
// its low nibble the kind (below) and its high nibble a parameter, plus the bytes it takes.
//
// Checked, besides "no crash, no sanitizer report, no leak": every frame the server writes decodes
// (well formed, within our frame size), and once the client is done the connection closes and
// every pool block comes back.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/memory_transport.h"
#include "http/fuzz_connection.h"
#include "http/fuzz_dispatcher.h"
#include "http2/connection.h"
#include "http2/frame.h"
#include "http2/hpack.h"

namespace sluice::http2 {
namespace {

using http::FuzzCheck;

size_t ThrowBodySize(const http::Request&) { return 20000; }

class Client final : public http::FuzzConnectionHarness<Connection, ConnectionCounters> {
 public:
  Client(OutputStrategy strategy, bool reads) : FuzzConnectionHarness(reads, &ThrowBodySize) {
    ConnectionOptions options;
    options.output.strategy = strategy;
    conn_ =
        std::make_shared<Connection>(TakeTransport(), options, &dispatcher_, &counters_, &pool_);
  }

 private:
  uint32_t RecentStream(uint8_t pick) const {
    if (next_stream_ <= 1) return 1;
    const uint32_t back = 2u * (pick % 4);
    return next_stream_ - 2 > back ? next_stream_ - 2 - back : 1;
  }

  void Execute(http::FuzzProgram& p) override {
    std::string out(kClientPreface);
    AppendSettings({}, &out);
    pending_ += out;
    while (!p.done()) {
      const uint8_t op = p.Byte();
      const uint8_t arg = op >> 4;
      switch (op & 0x0f) {
        case 0:
        case 1: {  // a request: GET /plaintext, /big, /throw, /nowhere, or POST /echo
          static constexpr std::array<std::string_view, 5> kPaths = {"/plaintext", "/big", "/throw",
                                                                     "/nowhere", "/echo"};
          const std::string_view path = kPaths[arg % kPaths.size()];
          const bool post = path == "/echo";
          std::vector<HeaderField> fields = {{":method", post ? "POST" : "GET"},
                                             {":scheme", "http"},
                                             {":path", path},
                                             {":authority", "fuzz"}};
          if ((arg & 8) != 0) fields.push_back({"content-length", "5"});
          std::string block;
          FuzzCheck(encoder_.Encode(fields, &block).ok(), "encode");
          const bool end = !post && (op & 1) == 0;
          AppendHeaders(next_stream_, AsBytes(block), end, kMinMaxFrameSize, &pending_);
          next_stream_ += 2;
          break;
        }
        case 2: {  // DATA on a recent stream
          const std::string_view data = p.Bytes(p.Byte() % 64);
          AppendData(RecentStream(arg), AsBytes(data), (arg & 4) != 0, &pending_);
          break;
        }
        case 3:  // WINDOW_UPDATE, the connection's or a stream's
          AppendWindowUpdate((arg & 1) != 0 ? 0 : RecentStream(arg >> 1), p.U32() & 0x7fffffff,
                             &pending_);
          break;
        case 4:  // RST_STREAM
          AppendRstStream(RecentStream(arg), static_cast<ErrorCode>(p.Byte() % 14), &pending_);
          break;
        case 5: {  // SETTINGS: one setting, any id and value
          const Setting s{static_cast<uint16_t>(p.Byte() % 8), p.U32()};
          NoteSetting(s.id, s.value);
          AppendSettings({&s, 1}, &pending_);
          break;
        }
        case 6: {  // PING (or its ACK)
          std::array<uint8_t, 8> data{};
          data[0] = p.Byte();
          AppendPing(data, (arg & 1) != 0, &pending_);
          break;
        }
        case 7: {  // a raw frame: any type, flags, stream id and payload
          const uint8_t type = p.Byte();
          const uint8_t flags = p.Byte();
          const uint32_t stream = (arg & 1) != 0 ? RecentStream(arg >> 1) : p.U32() & 0x7fffffff;
          const std::string_view payload = p.Bytes(p.Byte());
          if (type == static_cast<uint8_t>(FrameType::kSettings) && stream == 0) {
            for (size_t i = 0; i + 6 <= payload.size(); i += 6) {
              const auto* b = reinterpret_cast<const uint8_t*>(payload.data() + i);
              NoteSetting(static_cast<uint16_t>(b[0] << 8 | b[1]),
                          static_cast<uint32_t>(b[2]) << 24 | b[3] << 16 | b[4] << 8 | b[5]);
            }
          }
          uint8_t header[kFrameHeaderSize];
          WriteFrameHeader(header, static_cast<uint32_t>(payload.size()),
                           static_cast<FrameType>(type), flags, stream);
          pending_.append(reinterpret_cast<const char*>(header), sizeof(header));
          pending_.append(payload);
          break;
        }
        case 8:  // raw junk (which the server may read as frames, SETTINGS among them)
          junk_sent_ = true;
          pending_.append(p.Bytes(p.Byte() % 32));
          break;
        case 9: {  // trailers on a recent stream
          std::string block;
          const std::vector<HeaderField> fields = {{(arg & 1) != 0 ? ":path" : "x-trailer", "1"}};
          FuzzCheck(encoder_.Encode(fields, &block).ok(), "encode");
          AppendHeaders(RecentStream(arg >> 1), AsBytes(block), (arg & 2) == 0, kMinMaxFrameSize,
                        &pending_);
          break;
        }
        case 10: {  // a request head split over HEADERS and CONTINUATIONs of a few bytes each
          std::string block;
          const std::vector<HeaderField> fields = {{":method", "GET"},
                                                   {":scheme", "http"},
                                                   {":path", "/plaintext"},
                                                   {":authority", "fuzz"},
                                                   {"x-pad", "padding"}};
          FuzzCheck(encoder_.Encode(fields, &block).ok(), "encode");
          // HEADERS then CONTINUATIONs of at most arg + 1 bytes of the block each.
          AppendHeaders(next_stream_, AsBytes(block), true, 1 + arg, &pending_);
          next_stream_ += 2;
          break;
        }
        case 11:  // deliver what is buffered so far: the connection gets its input in pieces
          Deliver();
          break;
        case 12:  // let the server write
          Drain();
          break;
        default:
          break;
      }
      if (pending_.size() > (64u << 10)) Deliver();
    }
  }

  static std::span<const uint8_t> AsBytes(std::string_view s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
  }

  void NoteSetting(uint16_t id, uint32_t value) {
    if (id == static_cast<uint16_t>(SettingId::kMaxFrameSize) && value >= kMinMaxFrameSize &&
        value <= kMaxMaxFrameSize) {
      max_frame_size_ = std::max(max_frame_size_, value);
    }
  }

  // Reads and checks what the server wrote: every frame decodes.
  void Drain() override {
    PipeReader& in = transport_->client_in();
    ReadResult read;
    if (!in.Read(&read, nullptr)) return;
    received_ += read.buffer.ToString();
    (void)in.AdvanceTo(read.buffer.size());
    size_t at = 0;
    while (received_.size() - at >= kFrameHeaderSize) {
      Frame frame;
      size_t consumed = 0;
      const DecodeStatus s = DecodeFrame(AsBytes(std::string_view(received_).substr(at)),
                                         kMaxMaxFrameSize, &frame, &consumed);
      if (s.result == DecodeResult::kNeedMore) break;
      if (s.result != DecodeResult::kFrame) {
        uint8_t header[kFrameHeaderSize];
        std::memcpy(header, received_.data() + at, kFrameHeaderSize);
        const FrameHeader h = ReadFrameHeader(header);
        std::fprintf(stderr, "frame type %u flags 0x%x stream %u length %u: %s\n", h.type, h.flags,
                     h.stream_id, h.length,
                     s.result == DecodeResult::kError ? s.error.debug().c_str() : "?");
      }
      FuzzCheck(s.result == DecodeResult::kFrame, "the server wrote a frame that does not decode");
      // Within the largest SETTINGS_MAX_FRAME_SIZE the client announced (unless junk it sent
      // may have announced another).
      if (!junk_sent_ && consumed - kFrameHeaderSize > max_frame_size_) {
        std::fprintf(stderr, "frame type %u of %zu bytes, the client allows %u\n",
                     static_cast<unsigned>(frame.header.type), consumed - kFrameHeaderSize,
                     max_frame_size_);
        FuzzCheck(false, "the server wrote a frame larger than the client allows");
      }
      at += consumed;
    }
    received_.erase(0, at);
  }

  HpackEncoder encoder_;
  std::string received_;
  uint32_t next_stream_ = 1;
  uint32_t max_frame_size_ = kMinMaxFrameSize;  // the largest valid one the client announced
  bool junk_sent_ = false;
};

}  // namespace
}  // namespace sluice::http2

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice::http2;  // NOLINT: the fuzz entry point
  if (size == 0) return 0;
  static constexpr OutputStrategy kStrategies[] = {
      OutputStrategy::kTwoLocks, OutputStrategy::kSingleLock, OutputStrategy::kQueue,
      OutputStrategy::kSingleLock};
  sluice::http::FuzzProgram program(data + 1, size - 1);
  Client client(kStrategies[data[0] & 3], (data[0] & 4) == 0);
  client.Run(program);
  return 0;
}
