// H2Session against hand-made server frames: a malformed response ends the connection with a
// named error instead of counting as answered, and header blocks and interim heads are bounded.
#include "loadgen/h2_session.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/memory_pool.h"
#include "core/pipe.h"
#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "http2/hpack.h"

namespace sluice::loadgen {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr uint8_t kData = 0x0, kHeaders = 0x1, kContinuation = 0x9;
constexpr uint8_t kEndStream = 0x1, kEndHeaders = 0x4;

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload) {
  std::string f;
  const size_t n = payload.size();
  f += static_cast<char>(n >> 16);
  f += static_cast<char>(n >> 8);
  f += static_cast<char>(n);
  f += static_cast<char>(type);
  f += static_cast<char>(flags);
  f += static_cast<char>(stream >> 24);
  f += static_cast<char>(stream >> 16);
  f += static_cast<char>(stream >> 8);
  f += static_cast<char>(stream);
  return f + payload;
}

// One encoder for a whole exchange, as a server's: its dynamic table carries over.
class Server {
 public:
  std::string Block(std::vector<std::pair<std::string, std::string>> fields) {
    std::vector<http2::HeaderField> views;
    for (const auto& [name, value] : fields) views.push_back({name, value});
    std::string block;
    EXPECT_TRUE(encoder_.Encode(views, &block).ok());
    return block;
  }
  std::string Head(uint32_t stream, std::string status, bool end_stream = false) {
    return Frame(kHeaders, kEndHeaders | (end_stream ? kEndStream : 0), stream,
                 Block({{":status", std::move(status)}, {"content-type", "text/plain"}}));
  }

 private:
  http2::HpackEncoder encoder_;
};

std::string Body(uint32_t stream) { return Frame(kData, kEndStream, stream, "ok"); }

struct Outcome {
  Status status;
  std::vector<std::pair<uint32_t, uint16_t>> responses;
};

class Recorder final : public H2Session::Listener {
 public:
  explicit Recorder(Outcome* outcome) : outcome_(outcome) {}
  void OnResponse(uint32_t id, uint16_t status) override {
    outcome_->responses.emplace_back(id, status);
  }
  void OnStreamReset(uint32_t, http2::ErrorCode) override {}

 private:
  Outcome* outcome_;
};

// Streams 1 and 3 are open; the server's SETTINGS, then `frames`.
Outcome Exchange(const std::string& frames) {
  static MemoryPool* pool = new MemoryPool(MemoryPoolOptions{.block_size = 4096});
  H2Session session(H2Session::Options{.max_streams = 4},
                    {{":method", "GET"}, {":scheme", "http"}, {":authority", "t"}, {":path", "/"}},
                    "");
  std::string out;
  session.Start(&out);
  EXPECT_EQ(session.SendRequest(&out), 1u);
  EXPECT_EQ(session.SendRequest(&out), 3u);
  Outcome outcome;
  Recorder recorder(&outcome);
  Pipe pipe(PipeOptions{.pool = pool, .pause_threshold = 0});
  EXPECT_TRUE(pipe.writer().Write(Frame(0x4, 0, 0, "") + frames).ok());
  FlushResult flushed;
  EXPECT_TRUE(pipe.writer().Flush(&flushed, nullptr));
  ReadResult read;
  EXPECT_TRUE(pipe.reader().Read(&read, nullptr));
  size_t consumed = 0;
  outcome.status = session.OnInput(read.buffer, 0, &consumed, &out, &recorder);
  EXPECT_TRUE(pipe.reader().AdvanceTo(consumed, read.buffer.size()).ok());
  pipe.writer().Complete();
  pipe.reader().Complete();
  return outcome;
}

// The operands of `+` are evaluated in no set order, and the encoder's table follows the order
// of its calls: frames are appended one statement at a time.
TEST(H2Session, WellFormedResponsesCompleteWithTheirStatus) {
  Server server;
  std::string frames = server.Head(1, "200");
  frames += server.Head(3, "404");
  frames += Body(3) + Body(1);
  const Outcome o = Exchange(frames);
  EXPECT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_THAT(o.responses, ElementsAre(Pair(3, 404), Pair(1, 200)));
}

TEST(H2Session, InterimHeadsAndTrailersAreNotTheResponse) {
  Server server;
  std::string frames = server.Head(1, "103");
  frames += server.Head(1, "200");
  frames += Frame(kData, 0, 1, "ok");
  frames += Frame(kHeaders, kEndHeaders | kEndStream, 1, server.Block({{"x-checksum", "1"}}));
  const Outcome o = Exchange(frames);
  EXPECT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_THAT(o.responses, ElementsAre(Pair(1, 200)));
}

TEST(H2Session, AStatusThatIsNotThreeDigitsFrom100To599IsABadResponse) {
  for (const char* status : {"99", "600", "1000", "20x", "0200", "200 ", ""}) {
    Server server;
    const Outcome o = Exchange(server.Head(1, status, /*end_stream=*/true));
    EXPECT_EQ(o.status.code(), StatusCode::kInvalidArgument) << '"' << status << '"';
    EXPECT_THAT(o.status.message(), HasSubstr("invalid :status"));
    EXPECT_TRUE(o.responses.empty()) << '"' << status << '"';
  }
}

TEST(H2Session, MalformedResponsesEndTheConnectionWithTheirReason) {
  struct Case {
    std::string name;
    std::string frames;
    std::string reason;
  };
  // Each case's frames come from an encoder of their own (a connection of their own).
  const std::vector<Case> cases = {
      {"no :status",
       Frame(kHeaders, kEndHeaders | kEndStream, 1,
             Server().Block({{"content-type", "text/plain"}})),
       "without :status"},
      {"two :status",
       Frame(kHeaders, kEndHeaders | kEndStream, 1,
             Server().Block({{":status", "200"}, {":status", "204"}})),
       "invalid :status"},
      {"DATA first", Body(1), "DATA before the response head"},
      {"a second head", "", "not trailers"},
      {"trailers without END_STREAM", "", "not trailers"},
      {"a 1xx ends the stream", Server().Head(1, "100", true), "1xx head ends the stream"},
      {"101", Server().Head(1, "101"), "unexpected 101"},
  };
  for (Case c : cases) {
    if (c.frames.empty()) {
      Server s;
      c.frames = s.Head(1, "200");
      c.frames += c.name == "a second head"
                      ? s.Head(1, "200", true)
                      : Frame(kHeaders, kEndHeaders, 1, s.Block({{"x-checksum", "1"}}));
    }
    const Outcome o = Exchange(c.frames);
    EXPECT_EQ(o.status.code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(o.status.message(), HasSubstr(c.reason)) << c.name;
    EXPECT_TRUE(o.responses.empty()) << c.name;
  }
}

TEST(H2Session, InterimHeadsAreBounded) {
  Server server;
  std::string frames;
  for (int i = 0; i < H2Session::kMaxInterimHeads; ++i) frames += server.Head(1, "103");
  EXPECT_TRUE(Exchange(frames + server.Head(1, "200", true)).status.ok());
  Server flood;
  frames.clear();
  for (int i = 0; i <= H2Session::kMaxInterimHeads; ++i) frames += flood.Head(1, "103");
  const Outcome o = Exchange(frames);
  EXPECT_THAT(o.status.message(), HasSubstr("too many 1xx"));
}

TEST(H2Session, EndlessContinuationFramesAreBounded) {
  Server server;
  // Empty CONTINUATIONs cost the server nothing to send; they still count against the block.
  std::string frames = Frame(kHeaders, 0, 1, server.Block({{":status", "200"}}));
  for (size_t n = 0; n * 9 <= H2Session::kMaxHeaderBlockBytes; ++n) {
    frames += Frame(kContinuation, 0, 1, "");
  }
  const Outcome o = Exchange(frames);
  EXPECT_EQ(o.status.code(), StatusCode::kResourceExhausted) << o.status.ToString();
}

TEST(H2Session, AHeaderListThatDecodesPastTheBoundIsRefused) {
  Server server;
  // One 1,000-byte field, then the same field by its dynamic-table index 99 times: a byte on the
  // wire each, 1,037 bytes of header list each.
  const std::string big(1000, 'v');
  std::vector<std::pair<std::string, std::string>> fields = {{":status", "200"}};
  for (int i = 0; i < 100; ++i) fields.emplace_back("x-big", big);
  const std::string block = server.Block(fields);
  ASSERT_LT(block.size(), 2000u);
  const Outcome o = Exchange(Frame(kHeaders, kEndHeaders | kEndStream, 1, block));
  EXPECT_EQ(o.status.code(), StatusCode::kResourceExhausted) << o.status.ToString();
  EXPECT_THAT(o.status.message(), HasSubstr("header list too large"));
}

}  // namespace
}  // namespace sluice::loadgen
