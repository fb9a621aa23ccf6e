// H2Session against hand-made server frames: a malformed response, or a server that breaks the
// protocol (flow control, stream states), ends the connection with a named error instead of
// counting as answered; header blocks and interim heads are bounded.
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

constexpr uint8_t kData = 0x0, kHeaders = 0x1, kPriority = 0x2, kRstStream = 0x3, kSettings = 0x4,
                  kWindowUpdate = 0x8, kContinuation = 0x9;
constexpr uint8_t kEndStream = 0x1, kEndHeaders = 0x4;
constexpr uint16_t kMaxConcurrentStreams = 0x3, kInitialWindowSize = 0x4;
constexpr uint32_t kMaxWindow = 0x7fffffff, kDefaultWindow = 65535;

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

std::string U32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string WindowUpdate(uint32_t stream, uint32_t increment) {
  return Frame(kWindowUpdate, 0, stream, U32(increment));
}

std::string Settings(uint16_t id, uint32_t value) {
  return Frame(kSettings, 0, 0,
               std::string{static_cast<char>(id >> 8), static_cast<char>(id)} + U32(value));
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
  // A head with a content-length (several values: several fields).
  std::string HeadWithLength(uint32_t stream, std::string status, std::vector<std::string> lengths,
                             bool end_stream = false) {
    std::vector<std::pair<std::string, std::string>> fields = {{":status", std::move(status)}};
    for (std::string& length : lengths) fields.emplace_back("content-length", std::move(length));
    return Frame(kHeaders, kEndHeaders | (end_stream ? kEndStream : 0), stream, Block(fields));
  }

 private:
  http2::HpackEncoder encoder_;
};

std::string Body(uint32_t stream) { return Frame(kData, kEndStream, stream, "ok"); }

struct Outcome {
  Status status;
  std::vector<std::pair<uint32_t, uint16_t>> responses;
  // After the frames: the session's stalled_by_peer_limit() and sendable().
  bool stalled = false;
  size_t sendable = 0;
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

// Streams 1 and 3 are open (requests with `method`); the server's SETTINGS, then `frames`.
Outcome Exchange(const std::string& frames, const std::string& method = "GET") {
  static MemoryPool* pool = new MemoryPool(MemoryPoolOptions{.block_size = 4096});
  H2Session session(H2Session::Options{.max_streams = 4},
                    {{":method", method}, {":scheme", "http"}, {":authority", "t"}, {":path", "/"}},
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
  outcome.stalled = session.stalled_by_peer_limit();
  outcome.sendable = session.sendable();
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

// RFC 9113 §6.9.1: no WINDOW_UPDATE may take a send window past 2^31-1. Both windows start at
// 65,535 (the requests carry no body).
TEST(H2Session, AWindowUpdatePastTheLargestWindowIsAFlowControlError) {
  for (uint32_t stream : {0u, 1u}) {
    Server fits;
    std::string frames = WindowUpdate(stream, kMaxWindow - kDefaultWindow);
    frames += fits.Head(1, "200", true);
    const Outcome ok = Exchange(frames);
    EXPECT_TRUE(ok.status.ok()) << stream << ": " << ok.status.ToString();
    EXPECT_THAT(ok.responses, ElementsAre(Pair(1, 200)));

    Server server;
    frames = WindowUpdate(stream, kMaxWindow - kDefaultWindow);
    frames += WindowUpdate(stream, 1);
    frames += server.Head(1, "200", true);
    const Outcome o = Exchange(frames);
    EXPECT_EQ(o.status.code(), StatusCode::kInvalidArgument) << stream;
    EXPECT_THAT(o.status.message(), HasSubstr("past 2^31-1"));
    EXPECT_THAT(o.status.message(), HasSubstr("FLOW_CONTROL_ERROR"));
    EXPECT_TRUE(o.responses.empty()) << stream;
  }
}

// §6.9.2: a larger SETTINGS_INITIAL_WINDOW_SIZE grows the open streams' windows as well.
TEST(H2Session, AnInitialWindowSizeThatTakesAStreamWindowPastTheLargestIsAFlowControlError) {
  Server server;
  std::string frames = WindowUpdate(3, kMaxWindow - kDefaultWindow);
  frames += Settings(kInitialWindowSize, kDefaultWindow + 1);
  frames += server.Head(1, "200", true);
  const Outcome o = Exchange(frames);
  EXPECT_EQ(o.status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status.message(), HasSubstr("SETTINGS_INITIAL_WINDOW_SIZE"));
  EXPECT_THAT(o.status.message(), HasSubstr("stream 3"));
  EXPECT_TRUE(o.responses.empty());
}

// §6.9: an increment of 0 is a PROTOCOL_ERROR of the connection, or of the stream. A stream of ours
// still waiting for its response then ends the connection; one already answered is only reset.
TEST(H2Session, AZeroWindowIncrementIsAProtocolError) {
  const Outcome connection = Exchange(WindowUpdate(0, 0));
  EXPECT_EQ(connection.status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(connection.status.message(), HasSubstr("zero increment"));
  EXPECT_THAT(connection.status.message(), HasSubstr("PROTOCOL_ERROR"));

  Server open;
  std::string frames = WindowUpdate(1, 0);
  frames += open.Head(1, "200", true);
  const Outcome o = Exchange(frames);
  EXPECT_EQ(o.status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(o.status.message(), HasSubstr("zero increment on stream 1"));
  EXPECT_TRUE(o.responses.empty());

  Server answered;
  frames = answered.Head(1, "200", true);
  frames += WindowUpdate(1, 0);
  frames += answered.Head(3, "200", true);
  const Outcome after = Exchange(frames);
  EXPECT_TRUE(after.status.ok()) << after.status.ToString();
  EXPECT_THAT(after.responses, ElementsAre(Pair(1, 200), Pair(3, 200)));
}

// §5.1, §5.1.1: the client opened streams 1 and 3. Even streams are the server's, which may open
// none with push off; 5 and above are idle. Only PRIORITY may name them.
TEST(H2Session, FramesOnStreamsTheClientNeverOpenedAreProtocolErrors) {
  struct Case {
    std::string name;
    std::string frame;
  };
  const std::vector<Case> cases = {
      {"HEADERS on 2", Server().Head(2, "200", true)},
      {"DATA on 2", Body(2)},
      {"HEADERS on 5", Server().Head(5, "200", true)},
      {"DATA on 7", Body(7)},
      {"RST_STREAM on 5", Frame(kRstStream, 0, 5, U32(0x8))},
      {"WINDOW_UPDATE on 4", WindowUpdate(4, 100)},
      {"WINDOW_UPDATE of 0 on 9", WindowUpdate(9, 0)},
  };
  for (const Case& c : cases) {
    Server server;
    std::string frames = c.frame;
    frames += server.Head(1, "200", true);
    const Outcome o = Exchange(frames);
    EXPECT_EQ(o.status.code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(o.status.message(), HasSubstr("which we never opened")) << c.name;
    EXPECT_THAT(o.status.message(), HasSubstr("PROTOCOL_ERROR")) << c.name;
    EXPECT_TRUE(o.responses.empty()) << c.name;
  }
  Server server;
  std::string frames = Frame(kPriority, 0, 5, U32(1) + std::string(1, '\x0f'));
  frames += server.Head(1, "200", true);
  const Outcome priority = Exchange(frames);
  EXPECT_TRUE(priority.status.ok()) << priority.status.ToString();
  EXPECT_THAT(priority.responses, ElementsAre(Pair(1, 200)));
}

// §5.1: once the server ended a stream (END_STREAM, or its RST_STREAM), HEADERS or DATA on it is
// STREAM_CLOSED. WINDOW_UPDATE and RST_STREAM may still come.
TEST(H2Session, HeadersOrDataAfterTheServerEndedAStreamAreStreamClosed) {
  for (const std::string late : {"DATA", "HEADERS", "DATA after RST_STREAM"}) {
    Server server;
    std::string frames;
    if (late == "DATA after RST_STREAM") {
      frames = Frame(kRstStream, 0, 1, U32(0x2));
      frames += Body(1);
    } else {
      frames = server.Head(1, "200");
      frames += Body(1);
      frames += late == "DATA" ? Body(1) : server.Head(1, "200", true);
    }
    frames += server.Head(3, "200", true);
    const Outcome o = Exchange(frames);
    EXPECT_EQ(o.status.code(), StatusCode::kInvalidArgument) << late;
    EXPECT_THAT(o.status.message(), HasSubstr("on stream 1 after the server ended it")) << late;
    EXPECT_THAT(o.status.message(), HasSubstr("STREAM_CLOSED")) << late;
    // Stream 1's response was whole when it ended, and counted; stream 3 never got its turn.
    if (late != "DATA after RST_STREAM") {
      EXPECT_THAT(o.responses, ElementsAre(Pair(1, 200))) << late;
    }
  }
  Server server;
  std::string frames = server.Head(1, "200", true);
  frames += WindowUpdate(1, 100);
  frames += Frame(kRstStream, 0, 1, U32(0));
  frames += server.Head(3, "200", true);
  const Outcome o = Exchange(frames);
  EXPECT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_THAT(o.responses, ElementsAre(Pair(1, 200), Pair(3, 200)));
}

// §8.1.1: the DATA of a response adds up to its content-length, or the response is malformed.
TEST(H2Session, DataThatDisagreesWithContentLengthIsABadResponse) {
  struct Case {
    std::string name;
    std::vector<std::string> lengths;
    std::vector<std::string> data;  // the last one ends the stream; none: the head ends it
    bool trailers = false;          // a trailer block ends the stream instead
    std::string reason;             // empty: well-formed
  };
  const std::vector<Case> cases = {
      {"exact", {"4"}, {"ok", "ok"}, false, ""},
      {"exact, then trailers", {"2"}, {"ok"}, true, ""},
      {"empty", {"0"}, {}, false, ""},
      {"the same value twice", {"2", "2"}, {"ok"}, false, ""},
      {"more", {"3"}, {"ok", "ok"}, false, "beyond the response's content-length"},
      {"less", {"5"}, {"ok"}, false, "END_STREAM before the response's content-length"},
      {"none", {"2"}, {}, false, "END_STREAM before the response's content-length"},
      {"less, then trailers", {"5"}, {"ok"}, true, "END_STREAM before"},
      {"not a number", {"2x"}, {"ok"}, false, "invalid content-length"},
      {"a list", {"2, 2"}, {"ok"}, false, "invalid content-length"},
      {"two values", {"2", "3"}, {"ok"}, false, "invalid content-length"},
  };
  for (const Case& c : cases) {
    Server server;
    std::string frames = server.HeadWithLength(1, "200", c.lengths, c.data.empty() && !c.trailers);
    for (size_t i = 0; i < c.data.size(); ++i) {
      const bool last = i + 1 == c.data.size() && !c.trailers;
      frames += Frame(kData, last ? kEndStream : 0, 1, c.data[i]);
    }
    if (c.trailers) {
      frames += Frame(kHeaders, kEndHeaders | kEndStream, 1, server.Block({{"x-checksum", "1"}}));
    }
    const Outcome o = Exchange(frames);
    if (c.reason.empty()) {
      EXPECT_TRUE(o.status.ok()) << c.name << ": " << o.status.ToString();
      EXPECT_THAT(o.responses, ElementsAre(Pair(1, 200))) << c.name;
    } else {
      EXPECT_EQ(o.status.code(), StatusCode::kInvalidArgument) << c.name;
      EXPECT_THAT(o.status.message(), HasSubstr(c.reason)) << c.name;
      EXPECT_THAT(o.status.message(), HasSubstr("PROTOCOL_ERROR")) << c.name;
      EXPECT_TRUE(o.responses.empty()) << c.name;
    }
  }
}

// RFC 9110 §6.4.1: a response to HEAD, a 204 and a 304 have no content: their content-length
// describes another response, and DATA with any payload on them is malformed.
TEST(H2Session, ResponsesWithoutContentIgnoreContentLengthAndCarryNoData) {
  struct Case {
    std::string method;
    std::string status;
  };
  for (const Case& c : std::vector<Case>{{"HEAD", "200"}, {"GET", "204"}, {"GET", "304"}}) {
    const std::string name = c.method + " " + c.status;
    Server server;
    const Outcome ok = Exchange(server.HeadWithLength(1, c.status, {"10"}, true), c.method);
    EXPECT_TRUE(ok.status.ok()) << name << ": " << ok.status.ToString();
    EXPECT_THAT(ok.responses, ElementsAre(Pair(1, std::stoi(c.status)))) << name;

    Server empty_data;
    std::string frames = empty_data.HeadWithLength(1, c.status, {"10"});
    frames += Frame(kData, kEndStream, 1, "");
    EXPECT_TRUE(Exchange(frames, c.method).status.ok()) << name;

    Server with_data;
    frames = with_data.HeadWithLength(1, c.status, {"2"});
    frames += Body(1);
    const Outcome o = Exchange(frames, c.method);
    EXPECT_EQ(o.status.code(), StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(o.status.message(), HasSubstr("beyond the response's content-length")) << name;
    EXPECT_TRUE(o.responses.empty()) << name;
  }
}

// §8.2.1: field names are lowercase. nghttp2's HPACK decoder hands names over as they were
// encoded (it validates them only in its session, which sluice does not use), so the session
// checks them itself: in a head, an interim head and trailers alike.
TEST(H2Session, UppercaseInAResponseFieldNameIsABadResponse) {
  for (const std::string where : {"head", "interim head", "trailers"}) {
    Server server;
    std::string frames;
    if (where == "head") {
      frames = Frame(kHeaders, kEndHeaders | kEndStream, 1,
                     server.Block({{":status", "200"}, {"Content-Type", "text/plain"}}));
    } else if (where == "interim head") {
      frames = Frame(kHeaders, kEndHeaders, 1, server.Block({{":status", "103"}, {"Link", "<a>"}}));
      frames += server.Head(1, "200", true);
    } else {
      frames = server.Head(1, "200");
      frames += Frame(kData, 0, 1, "ok");
      frames += Frame(kHeaders, kEndHeaders | kEndStream, 1, server.Block({{"X-Checksum", "1"}}));
    }
    const Outcome o = Exchange(frames);
    EXPECT_EQ(o.status.code(), StatusCode::kInvalidArgument) << where;
    EXPECT_THAT(o.status.message(), HasSubstr("uppercase in header field name")) << where;
    EXPECT_THAT(o.status.message(), HasSubstr("PROTOCOL_ERROR")) << where;
    EXPECT_TRUE(o.responses.empty()) << where;
  }
}

// A SETTINGS_MAX_CONCURRENT_STREAMS of 0 keeps streams from opening; once none of ours is open,
// the session says it is stalled (Http2Client bounds that wait), until the server raises it.
TEST(H2Session, AStreamLimitOfZeroWithNoStreamOpenIsAStall) {
  Server server;
  std::string frames = Settings(kMaxConcurrentStreams, 0);
  frames += server.Head(1, "200", true);
  const Outcome one_open = Exchange(frames);
  EXPECT_TRUE(one_open.status.ok()) << one_open.status.ToString();
  EXPECT_FALSE(one_open.stalled);  // stream 3's answer is still to come
  EXPECT_EQ(one_open.sendable, 0u);

  frames += server.Head(3, "200", true);
  const Outcome none_open = Exchange(frames);
  EXPECT_TRUE(none_open.status.ok()) << none_open.status.ToString();
  EXPECT_THAT(none_open.responses, ElementsAre(Pair(1, 200), Pair(3, 200)));
  EXPECT_TRUE(none_open.stalled);
  EXPECT_EQ(none_open.sendable, 0u);

  frames += Settings(kMaxConcurrentStreams, 2);
  const Outcome raised = Exchange(frames);
  EXPECT_FALSE(raised.stalled);
  EXPECT_EQ(raised.sendable, 2u);
}

}  // namespace
}  // namespace sluice::loadgen
