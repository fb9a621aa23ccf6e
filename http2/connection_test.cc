// An HTTP/2 server connection driven in process. The streams a loop's connections share
// (SpareStreams): what one connection finished with serves the next request of another, each
// answer still goes to its own connection and stream, and the set keeps no more than its bounds.
// Repeated request heads (a header block with the bytes of the last one, copied whole from the
// first head it gave): the handler sees each as the first, content-length included. The frame
// writer's lock: inline answers take none while no exchange of the connection is carried off the
// loop, and every answer takes it while one is. Connections run over in-memory transports on one
// loop, run on the test's thread.
#include "http2/connection.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "core/event_loop.h"
#include "core/memory_pool.h"
#include "core/memory_transport.h"
#include "http/date_cache.h"
#include "http/router_dispatcher.h"
#include "http2/frame.h"
#include "http2/hpack.h"
#include "telemetry/hooks.h"

namespace sluice::http2 {
namespace {

constexpr std::string_view kBody = "Hello, World!";

std::span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// What the client side read: per stream id, whether its response ended with the expected body.
struct Answers {
  std::vector<uint32_t> ended;   // streams whose DATA with END_STREAM carried kBody
  std::vector<uint32_t> closed;  // streams whose DATA carried END_STREAM, whatever its payload
  std::vector<uint32_t> resets;  // RST_STREAM
  bool goaway = false;
  uint32_t goaway_code = 0;     // the last GOAWAY's error code
  uint32_t goaway_last_id = 0;  // and its last stream id
};

// One client connection of the loop: its transport, the server connection, its HPACK state.
class Client {
 public:
  Client(EventLoop* loop, MemoryPool* pool, http::RouterDispatcher* dispatcher,
         ConnectionCounters* counters, SpareStreams* spares,
         const ConnectionOptions& options = {}) {
    auto transport = std::make_unique<MemoryTransport>(loop, pool);
    transport_ = transport.get();
    conn_ = std::make_shared<Connection>(std::move(transport), options, dispatcher, counters,
                                         pool, spares);
  }

  // On the loop: starts the connection and sends the preface.
  void Start() {
    conn_->Start();
    std::string hello(kClientPreface);
    AppendSettings({}, &hello);
    Send(hello);
  }

  // On the loop: GET /plaintext on each of `count` new streams, in one write; `extra` adds a
  // field to each request. Returns their ids.
  std::vector<uint32_t> Get(int count, std::string_view extra = {}) {
    std::vector<HeaderField> fields = {
        {":method", "GET"}, {":path", "/plaintext"}, {":scheme", "http"}, {":authority", "a"}};
    if (!extra.empty()) fields.push_back({"x-extra", extra});
    return Send(fields, count);
  }

  // On the loop: a request with `fields` (END_STREAM on its HEADERS unless `end_stream` is false)
  // on each of `count` new streams, in one write. Returns their ids.
  std::vector<uint32_t> Send(const std::vector<HeaderField>& fields, int count,
                             bool end_stream = true) {
    std::string bytes;
    std::vector<uint32_t> ids;
    for (int i = 0; i < count; ++i) {
      std::string block;
      EXPECT_TRUE(encoder_.Encode(fields, &block).ok());
      ids.push_back(next_id_);
      AppendHeaders(next_id_, AsBytes(block), end_stream, kMinMaxFrameSize, &bytes);
      next_id_ += 2;
    }
    Send(bytes);
    return ids;
  }

  // On the loop: the frames the connection wrote since the last call.
  Answers Read() {
    Answers answers;
    PipeReader& in = transport_->client_in();
    ReadResult read;
    if (!in.Read(&read, nullptr)) return answers;
    std::string bytes(read.buffer.size(), '\0');
    read.buffer.CopyTo(0, std::span<uint8_t>(reinterpret_cast<uint8_t*>(bytes.data()),
                                             bytes.size()));
    (void)in.AdvanceTo(bytes.size(), bytes.size());
    size_t at = 0;
    while (bytes.size() - at >= kFrameHeaderSize) {
      const FrameHeader h = ReadFrameHeader(reinterpret_cast<const uint8_t*>(bytes.data() + at));
      if (bytes.size() - at - kFrameHeaderSize < h.length) break;
      const std::string_view payload(bytes.data() + at + kFrameHeaderSize, h.length);
      const bool data_end =
          h.type == static_cast<uint8_t>(FrameType::kData) && (h.flags & flags::kEndStream) != 0;
      if (data_end) answers.closed.push_back(h.stream_id);
      if (data_end && payload == kBody) {
        answers.ended.push_back(h.stream_id);
      } else if (h.type == static_cast<uint8_t>(FrameType::kRstStream)) {
        answers.resets.push_back(h.stream_id);
      } else if (h.type == static_cast<uint8_t>(FrameType::kGoaway)) {
        answers.goaway = true;
        Frame goaway;
        size_t used = 0;
        const std::span<const uint8_t> frame(reinterpret_cast<const uint8_t*>(bytes.data()) + at,
                                             kFrameHeaderSize + h.length);
        if (DecodeFrame(frame, kMaxMaxFrameSize, &goaway, &used).result == DecodeResult::kFrame) {
          answers.goaway_last_id = goaway.last_stream_id;
          answers.goaway_code = static_cast<uint32_t>(goaway.error_code);
        }
      }
      at += kFrameHeaderSize + h.length;
    }
    return answers;
  }

  // On the loop: frames the caller built (frame.h's Append*), in one write.
  void SendFrames(std::string_view frames) { Send(frames); }

  // On the loop: the fields of the response heads the connection wrote since the last call,
  // decoded in order (for a client that reads every head through this: the HPACK state is its
  // own).
  std::vector<std::pair<std::string, std::string>> ReadHeaderFields() {
    std::vector<std::pair<std::string, std::string>> fields;
    PipeReader& in = transport_->client_in();
    ReadResult read;
    if (!in.Read(&read, nullptr)) return fields;
    std::string bytes(read.buffer.size(), '\0');
    read.buffer.CopyTo(0,
                       std::span<uint8_t>(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size()));
    (void)in.AdvanceTo(bytes.size(), bytes.size());
    size_t at = 0;
    while (bytes.size() - at >= kFrameHeaderSize) {
      const FrameHeader h = ReadFrameHeader(reinterpret_cast<const uint8_t*>(bytes.data() + at));
      if (bytes.size() - at - kFrameHeaderSize < h.length) break;
      if (h.type == static_cast<uint8_t>(FrameType::kHeaders) ||
          h.type == static_cast<uint8_t>(FrameType::kContinuation)) {
        const Status s = decoder_.Decode(
            AsBytes(std::string_view(bytes).substr(at + kFrameHeaderSize, h.length)),
            (h.flags & flags::kEndHeaders) != 0,
            [&](std::string_view name, std::string_view value) {
              fields.emplace_back(std::string(name), std::string(value));
            });
        EXPECT_TRUE(s.ok()) << s.ToString();
      }
      at += kFrameHeaderSize + h.length;
    }
    return fields;
  }

  Connection& conn() { return *conn_; }

  // On the loop: as a socket's end would.
  void End() {
    transport_->client_out().Complete();
    conn_->Abort();
  }

 private:
  void Send(std::string_view bytes) {
    PipeWriter& out = transport_->client_out();
    ASSERT_TRUE(out.Write(bytes).ok());
    FlushResult flushed;
    (void)out.Flush(&flushed, [](FlushResult) {});  // runs the connection's pending read
  }

  MemoryTransport* transport_;
  std::shared_ptr<Connection> conn_;
  HpackEncoder encoder_;
  HpackDecoder decoder_;  // ReadHeaderFields'
  uint32_t next_id_ = 1;
};

// GET /big on `dispatcher`: 200,000 bytes, over the peer's default windows; `runs`, if given,
// counts its handler's runs.
void AddBigAnswer(http::RouterDispatcher& dispatcher, int* runs = nullptr) {
  ASSERT_TRUE(dispatcher
                  .Add("GET", "/big",
                       [runs](http::Request&, http::Response& res) {
                         if (runs != nullptr) ++*runs;
                         res.Write(std::string(200'000, 'x'));
                       })
                  .ok());
}
std::vector<HeaderField> BigGet() {
  return {{":method", "GET"}, {":path", "/big"}, {":scheme", "http"}, {":authority", "a"}};
}
// Options that hold new streams back once two /big answers wait for window (134,465 + 200,000
// bytes: over 300,000).
ConnectionOptions HoldingAfterTwoBigAnswers() {
  ConnectionOptions options;
  options.max_backlogged_streams = 2;
  options.max_backlog_bytes = 300'000;
  return options;
}
// A peer's SETTINGS and WINDOW_UPDATE that open every window as far as it goes.
std::string OpenAllWindows() {
  std::string frames;
  const Setting window{static_cast<uint16_t>(SettingId::kInitialWindowSize), 0x7fffffff};
  AppendSettings(std::span<const Setting>(&window, 1), &frames);
  AppendWindowUpdate(0, 0x7fffffff - 65'535, &frames);
  return frames;
}

class ConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dispatcher_
                    .Add("GET", "/plaintext",
                         [](http::Request&, http::Response& res) { res.Write(kBody); })
                    .ok());
    // Records what the handler sees of the request, and answers like /plaintext.
    auto record = [this](http::Request& req, http::Response& res) {
      std::string seen = std::string(req.method()) + " " + std::string(req.scheme()) + "://" +
                         std::string(req.authority()) + std::string(req.path()) + "?" +
                         std::string(req.query()) + " v" + std::string(req.protocol_version());
      for (size_t i = 0; i < req.header_count(); ++i) {
        seen += " " + std::string(req.header(i).first) + "=" + std::string(req.header(i).second);
      }
      seen += " length=" + (req.content_length() ? std::to_string(*req.content_length()) : "-");
      seen_.push_back(seen);
      res.Write(kBody);
    };
    ASSERT_TRUE(dispatcher_.Add("GET", "/echo", record).ok());
    // Deferred: the response is handed to the test's thread (late_), which ends it.
    ASSERT_TRUE(dispatcher_
                    .Add("GET", "/late",
                         [this](http::Request&, http::Response& res) {
                           res.DeferEnd();
                           late_.set_value(&res);
                         })
                    .ok());
    ASSERT_TRUE(dispatcher_.Add("POST", "/echo", record).ok());
    auto loop = EventLoop::Create();
    ASSERT_TRUE(loop.ok());
    loop_ = std::move(*loop);
  }

  // Runs `body` on the loop (this thread), then what it queued.
  template <typename Body>
  void OnLoop(Body body) {
    loop_->Post([&body] { body(); });
    loop_->Post([this] { loop_->Stop(); });
    loop_->Run();
  }

  // A client whose connection shares `spares` (and counts in `counters`, by default the
  // fixture's), started.
  std::unique_ptr<Client> Connect(SpareStreams* spares, ConnectionCounters* counters = nullptr,
                                  const ConnectionOptions& options = {}) {
    auto client = std::make_unique<Client>(loop_.get(), &pool_, &dispatcher_,
                                           counters != nullptr ? counters : &counters_, spares,
                                           options);
    OnLoop([&] { client->Start(); });
    return client;
  }

  // `count` GETs of /plaintext from `client` in one write (see Client::Get), each answered.
  void GetAnswered(Client& client, int count, std::string_view extra = {}) {
    std::vector<uint32_t> ids;
    OnLoop([&] { ids = client.Get(count, extra); });
    OnLoop([&] { EXPECT_EQ(client.Read().ended, ids); });
  }

  // Ends the clients' connections (before the spares and counters go).
  void EndAll(std::vector<Client*> clients) {
    OnLoop([&] {
      for (Client* c : clients) c->End();
    });
    OnLoop([] {});
  }

  // The frame writers' lock acquisitions, as of their last flush.
  uint64_t WriterLocks() { return counters_.output.Snapshot().frame_lock.acquisitions; }

  // A new client with `options` (HoldingAfterTwoBigAnswers and more) that sends five GETs of /big
  // in one write, their ids in *ids: two run, three are held.
  std::unique_ptr<Client> FiveBigGets(const ConnectionOptions& options,
                                      ConnectionCounters* counters, SpareStreams* spares,
                                      std::vector<uint32_t>* ids) {
    AddBigAnswer(dispatcher_);
    std::unique_ptr<Client> client = Connect(spares, counters, options);
    OnLoop([&] { *ids = client->Send(BigGet(), 5); });
    EXPECT_EQ(counters->held_streams.load(), 3u);
    return client;
  }

  std::vector<std::string> seen_;  // by /echo
  std::promise<http::Response*> late_;  // by /late
  MemoryPool pool_;
  http::RouterDispatcher dispatcher_;
  ConnectionCounters counters_;
  std::unique_ptr<EventLoop> loop_;
};

TEST_F(ConnectionTest, ANewRequestReusesTheStreamAnotherConnectionOfTheLoopFinishedWith) {
  SpareStreams spares;
  std::unique_ptr<Client> a_client = Connect(&spares);
  std::unique_ptr<Client> b_client = Connect(&spares);
  Client& a = *a_client;
  Client& b = *b_client;
  std::vector<uint32_t> ids_a;
  OnLoop([&] { ids_a = a.Get(1); });
  OnLoop([&] { EXPECT_EQ(a.Read().ended, ids_a); });
  ASSERT_EQ(spares.size(), 1u);  // a's stream, finished

  // b's request takes it (a stream of b's own would leave two spares after the exchange), and the
  // answer goes to b's stream.
  std::vector<uint32_t> ids_b;
  OnLoop([&] { ids_b = b.Get(1); });
  OnLoop([&] {
    EXPECT_EQ(b.Read().ended, ids_b);
    EXPECT_TRUE(a.Read().ended.empty());  // nothing reached a
  });
  EXPECT_EQ(spares.size(), 1u);

  // And back to a, on its next stream.
  OnLoop([&] { ids_a = a.Get(1); });
  OnLoop([&] {
    const Answers answers = a.Read();
    EXPECT_EQ(answers.ended, ids_a);
    EXPECT_TRUE(answers.resets.empty());
    EXPECT_FALSE(answers.goaway);
  });
  EXPECT_EQ(spares.size(), 1u);
  EXPECT_EQ(counters_.requests.load(), 3u);
  EndAll({&a, &b});
}

TEST_F(ConnectionTest, StreamsServeBothConnectionsWhenTheirRequestsInterleave) {
  SpareStreams spares;
  std::unique_ptr<Client> a_client = Connect(&spares);
  std::unique_ptr<Client> b_client = Connect(&spares);
  Client& a = *a_client;
  Client& b = *b_client;
  // Each round, a batch on each connection in one loop pass: the streams a retires are the ones
  // b takes, and the other way round.
  for (int round = 0; round < 20; ++round) {
    std::vector<uint32_t> ids_a, ids_b;
    OnLoop([&] {
      ids_a = a.Get(8);
      ids_b = b.Get(8);
    });
    OnLoop([&] {
      EXPECT_EQ(a.Read().ended, ids_a) << "round " << round;
      EXPECT_EQ(b.Read().ended, ids_b) << "round " << round;
    });
  }
  // Never more than one pass's worth: each batch reused what the last one left.
  EXPECT_EQ(spares.size(), 8u);
  EndAll({&a, &b});
}

TEST_F(ConnectionTest, KeepNoMoreStreamsThanTheirCapacity) {
  SpareStreams spares(/*capacity=*/3);
  std::unique_ptr<Client> a_client = Connect(&spares);
  Client& a = *a_client;
  GetAnswered(a, 10);
  EXPECT_EQ(spares.size(), 3u);
  EndAll({&a});
}

TEST_F(ConnectionTest, AStreamWhoseBuffersGrewPastTheBoundIsFreedNotKept) {
  SpareStreams spares(/*capacity=*/16, /*max_stream_bytes=*/8 * 1024);
  std::unique_ptr<Client> a_client = Connect(&spares);
  Client& a = *a_client;
  // A 12 KiB field: the request keeps that much capacity, over the bound.
  GetAnswered(a, 1, std::string(12 * 1024, 'x'));
  EXPECT_EQ(spares.size(), 0u);
  GetAnswered(a, 1);
  EXPECT_EQ(spares.size(), 1u);
  EndAll({&a});
}

// The sink lowers the names of a response's fields (HTTP/2 requires lowercase), word by word: an
// uppercase letter at any place of a name of any length is found, at the edges of the range too.
TEST_F(ConnectionTest, ResponseFieldNamesGoOutLowercaseWhereverTheirUppercaseLettersAre) {
  std::vector<std::string> names;
  for (size_t n = 1; n <= 24; ++n) {
    for (size_t at = 0; at < n; ++at) {
      for (char upper : {'A', 'Z'}) {
        std::string name = "x" + std::string(n - 1, 'n');
        name[at] = upper;
        name += std::to_string(n) + "-" + std::to_string(at);  // each name differs
        names.push_back(name);
      }
    }
  }
  ASSERT_TRUE(dispatcher_
                  .Add("GET", "/names",
                       [&names](http::Request&, http::Response& res) {
                         for (const std::string& name : names) res.SetHeader(name, "v");
                         res.Write(kBody);
                       })
                  .ok());
  SpareStreams spares;
  std::unique_ptr<Client> a_client = Connect(&spares);
  Client& a = *a_client;
  const std::vector<HeaderField> get = {
      {":method", "GET"}, {":path", "/names"}, {":scheme", "http"}, {":authority", "a"}};
  OnLoop([&] { (void)a.ReadHeaderFields(); });  // our SETTINGS and window
  OnLoop([&] { (void)a.Send(get, 1); });
  std::vector<std::pair<std::string, std::string>> fields;
  OnLoop([&] { fields = a.ReadHeaderFields(); });
  std::vector<std::string> sent;
  for (const auto& [name, value] : fields) {
    if (!name.empty() && name.back() >= '0' && name.back() <= '9') sent.push_back(name);  // ours
  }
  std::vector<std::string> lowered = names;
  for (std::string& name : lowered) {
    for (char& c : name) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
  }
  EXPECT_EQ(sent, lowered);
  EndAll({&a});
}

// A wall clock stopped at a whole second of 1994, for the loop's date cache.
int64_t WallClockIn1994() { return int64_t{784111777} * 1'000'000'000; }

TEST_F(ConnectionTest, AnswersOnTheLoopTakeTheirDateFromItsPassTime) {
  // The loop thread's date cache is primed at a pass time with a wall clock stopped in 1994: an
  // answer given on the loop within that second of pass time carries the cached date, which only
  // a date taken from the pass time (no wall clock read per response) can.
  ASSERT_TRUE(
      dispatcher_.Add("GET", "/d", [](http::Request&, http::Response& res) { res.Write(kBody); })
          .ok());
  SpareStreams spares;
  std::unique_ptr<Client> a_client = Connect(&spares);
  Client& a = *a_client;
  const std::vector<HeaderField> get = {
      {":method", "GET"}, {":path", "/d"}, {":scheme", "http"}, {":authority", "a"}};
  OnLoop([&] { (void)a.ReadHeaderFields(); });  // our SETTINGS and window
  EventLoop::Clock::time_point primed_at;
  OnLoop([&] {
    primed_at = loop_->Now();
    http::DateCache& dates = http::DateCache::ForThisThread();
    (void)dates.At(0);  // another second: what an earlier test left cached is forgotten
    (void)dates.NowWithWallClock(primed_at, &WallClockIn1994);
  });
  std::string date;
  EventLoop::Clock::time_point answered_at;
  OnLoop([&] { (void)a.Send(get, 1); });
  OnLoop([&] {
    answered_at = loop_->Now();
    for (const auto& [name, value] : a.ReadHeaderFields()) {
      if (name == "date") date = value;
    }
  });
  if (answered_at - primed_at >= std::chrono::milliseconds(900)) {
    (void)http::DateCache::ForThisThread().At(0);
    GTEST_SKIP() << "the loop took most of a second to answer: the cached second is over";
  }
  EXPECT_EQ(date, "Sun, 06 Nov 1994 08:49:37 GMT");
  EndAll({&a});
  OnLoop([] { (void)http::DateCache::ForThisThread().At(0); });  // later tests: a fresh read
}

TEST_F(ConnectionTest, ARepeatedRequestHeadReachesTheHandlerAsTheFirstDid) {
  SpareStreams spares;
  std::unique_ptr<Client> a_client = Connect(&spares);
  Client& a = *a_client;
  const std::vector<HeaderField> echo = {{":method", "GET"},   {":path", "/echo?q=1"},
                                         {":scheme", "https"}, {":authority", "example.test"},
                                         {"x-one", "1"},       {"accept", "*/*"}};
  const std::vector<HeaderField> other = {{":method", "GET"},
                                          {":path", "/echo"},
                                          {":scheme", "http"},
                                          {":authority", "other.test"}};
  const std::string first = "GET https://example.test/echo?q=1 v2 x-one=1 accept=*/* length=-";
  const std::string second = "GET http://other.test/echo? v2 length=-";
  // The first block indexes its fields; from the second on the bytes repeat (kept, then copied
  // whole); then another head, and the first again.
  for (const auto* fields : {&echo, &echo, &echo, &echo, &other, &echo, &echo, &echo, &echo}) {
    std::vector<uint32_t> ids;
    OnLoop([&] { ids = a.Send(*fields, 1); });
    OnLoop([&] { EXPECT_EQ(a.Read().ended, ids); });
  }
  EXPECT_THAT(seen_, ::testing::ElementsAre(first, first, first, first, second, first, first, first,
                                            first));
  // Each run of the same head: the first indexes its fields (or, after `other`, is decoded once
  // more), the second is kept, the third repeats it and is saved, the rest are copied.
  EXPECT_EQ(counters_.copied_heads.load(), 3u);
  EndAll({&a});
}

TEST_F(ConnectionTest, ARepeatedRequestHeadKeepsItsContentLength) {
  SpareStreams spares;
  std::unique_ptr<Client> a_client = Connect(&spares);
  Client& a = *a_client;
  // content-length 3 with END_STREAM on the HEADERS: a malformed request (RFC 9113 §8.1.1), every
  // time, also when its head is copied from the first.
  const std::vector<HeaderField> post = {{":method", "POST"},
                                         {":path", "/echo"},
                                         {":scheme", "http"},
                                         {":authority", "a"},
                                         {"content-length", "3"}};
  for (int i = 0; i < 5; ++i) {
    std::vector<uint32_t> ids;
    OnLoop([&] { ids = a.Send(post, 1); });
    OnLoop([&] {
      const Answers answers = a.Read();
      EXPECT_EQ(answers.resets, ids) << "request " << i;
      EXPECT_TRUE(answers.ended.empty()) << "request " << i;
    });
  }
  EXPECT_TRUE(seen_.empty());
  EXPECT_EQ(counters_.copied_heads.load(), 2u);  // the fourth and the fifth
  EndAll({&a});
}

TEST_F(ConnectionTest, AConnectionCountingElsewhereKeepsSparesOfItsOwn) {
  SpareStreams spares;
  std::unique_ptr<Client> a_client = Connect(&spares);  // binds the set to counters_
  ConnectionCounters other_counters;
  std::unique_ptr<Client> b_client = Connect(&spares, &other_counters);
  Client& a = *a_client;
  Client& b = *b_client;
  GetAnswered(a, 2);
  ASSERT_EQ(spares.size(), 2u);
  // b neither takes from the set nor adds to it.
  GetAnswered(b, 3);
  EXPECT_EQ(spares.size(), 2u);
  EXPECT_EQ(other_counters.requests.load(), 3u);
  EndAll({&a, &b});
}

TEST_F(ConnectionTest, TrimFreesTheSpareStreamsRecentDemandDidNotNeed) {
  SpareStreams spares;
  std::unique_ptr<Client> a_client = Connect(&spares);
  Client& a = *a_client;
  GetAnswered(a, 10);
  ASSERT_EQ(spares.size(), 10u);
  spares.Trim();  // the first period starts: nothing is known to be unneeded yet
  EXPECT_EQ(spares.size(), 10u);
  GetAnswered(a, 3);  // three at once: seven stayed unused
  spares.Trim();
  EXPECT_EQ(spares.size(), 3u);
  spares.Trim();  // a period without requests
  EXPECT_EQ(spares.size(), 0u);
  GetAnswered(a, 1);  // and requests still get streams
  EXPECT_EQ(spares.size(), 1u);
  EndAll({&a});
}

TEST_F(ConnectionTest, InlineAnswersTakeNoWriterLockWhileNoExchangeIsCarriedOffTheLoop) {
  SpareStreams spares;
  std::unique_ptr<Client> client = Connect(&spares);
  GetAnswered(*client, 1);
  uint64_t before = WriterLocks();
  GetAnswered(*client, 4);
  const uint64_t for_4 = WriterLocks() - before;
  before = WriterLocks();
  GetAnswered(*client, 32);
  const uint64_t for_32 = WriterLocks() - before;
  // The pass's own acquisitions (the writer's events, the flush), none per answer.
  EXPECT_EQ(for_32, for_4);
  EXPECT_LT(for_32, 4u);
  EndAll({client.get()});
}

TEST_F(ConnectionTest, WhileAnExchangeIsCarriedOffTheLoopEveryAnswerTakesTheWriterLock) {
  SpareStreams spares;
  std::unique_ptr<Client> client_holder = Connect(&spares);
  Client& client = *client_holder;
  std::future<http::Response*> late = late_.get_future();
  std::vector<uint32_t> late_id;
  OnLoop([&] {
    late_id = client.Send(
        {{":method", "GET"}, {":path", "/late"}, {":scheme", "http"}, {":authority", "a"}}, 1);
  });
  ASSERT_EQ(late.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  http::Response* const res = late.get();
  // The late response is written by another thread while the loop answers 32 inline requests
  // of the same connection, and ended after them: both sides write into one frame writer, so the
  // loop must lock (a write without it is a data race ThreadSanitizer reports).
  std::promise<void> go;
  std::promise<void> answered;
  std::thread carrier([res, started = go.get_future(), done = answered.get_future()]() mutable {
    started.wait();
    res->Write(kBody);
    done.wait();
    res->End();
  });
  std::vector<uint32_t> ids;
  const uint64_t before = WriterLocks();
  OnLoop([&] {
    go.set_value();
    ids = client.Get(32);
  });
  answered.set_value();
  carrier.join();
  OnLoop([] {});  // the carrier's wake-up: its stream's end is taken, and the output flushed
  EXPECT_GE(WriterLocks() - before, 32u);
  const Answers answers = client.Read();
  std::vector<uint32_t> closed = answers.closed;
  std::vector<uint32_t> expected = ids;
  expected.push_back(late_id[0]);
  std::sort(closed.begin(), closed.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(closed, expected);
  EXPECT_TRUE(answers.resets.empty());
  EXPECT_FALSE(answers.goaway);

  // Once it ended, the loop is alone again: answers take no lock.
  const uint64_t after = WriterLocks();
  GetAnswered(client, 32);
  EXPECT_LT(WriterLocks() - after, 4u);
  EndAll({&client});
}

// A response head that fails to encode (nghttp2 out of memory) loses the HPACK state the peer
// shares: its connection ends in that pass with GOAWAY(INTERNAL_ERROR) and no stream's output;
// a handler still answering on another of its streams, on another thread, finds its writes
// refused; the loop's other connections go on being served.
TEST_F(ConnectionTest, AResponseHeadThatFailsToEncodeClosesOnlyItsConnection) {
  SpareStreams spares;
  std::unique_ptr<Client> a_holder = Connect(&spares);
  std::unique_ptr<Client> b_holder = Connect(&spares);
  Client& a = *a_holder;
  Client& b = *b_holder;
  std::future<http::Response*> late = late_.get_future();
  OnLoop([&] {
    a.Send({{":method", "GET"}, {":path", "/late"}, {":scheme", "http"}, {":authority", "a"}}, 1);
  });
  ASSERT_EQ(late.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  http::Response* const res = late.get();
  OnLoop([&] { (void)a.Read(); });  // the server's SETTINGS and acknowledgements
  const uint64_t errors_before = counters_.connection_errors.load();
  OnLoop([&] {
    a.conn().BreakEncoderForTesting();
    a.Get(1);
  });
  OnLoop([&] {
    const Answers answers = a.Read();
    EXPECT_TRUE(answers.goaway);
    EXPECT_EQ(answers.goaway_code, static_cast<uint32_t>(ErrorCode::kInternalError));
    EXPECT_TRUE(answers.closed.empty());
    EXPECT_TRUE(answers.resets.empty());
    // The connection is closing: once the peer ends its side, it is closed.
    a.End();
  });
  OnLoop([&] { EXPECT_TRUE(a.conn().closed()); });
  EXPECT_EQ(counters_.connection_errors.load(), errors_before + 1);
  std::thread carrier([res] {
    EXPECT_TRUE(res->Write(kBody));  // held until the head goes out
    EXPECT_FALSE(res->Flush());
    res->End();
  });
  carrier.join();
  OnLoop([] {});
  GetAnswered(b, 2);
  EndAll({&a, &b});
}

// A head that fails to encode while the connection drains after a graceful GOAWAY: the second
// GOAWAY (INTERNAL_ERROR) names the same last stream as the first, not a stream the peer opened
// after it, which was ignored (RFC 9113 §6.8: the id may not grow).
TEST_F(ConnectionTest, AFailedHeadDuringAGracefulShutdownKeepsTheFirstGoawaysLastStream) {
  SpareStreams spares;
  std::unique_ptr<Client> client = Connect(&spares);
  std::future<http::Response*> late = late_.get_future();
  OnLoop([&] {
    client->Send({{":method", "GET"}, {":path", "/late"}, {":scheme", "http"}, {":authority", "a"}},
                 1);
  });
  ASSERT_EQ(late.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  http::Response* const res = late.get();
  OnLoop([&] {
    (void)client->Read();  // the server's SETTINGS and acknowledgements
    client->conn().BeginShutdown();
    const Answers first = client->Read();
    EXPECT_TRUE(first.goaway);
    EXPECT_EQ(first.goaway_code, static_cast<uint32_t>(ErrorCode::kNoError));
    EXPECT_EQ(first.goaway_last_id, 1u);
    client->Get(1);  // stream 3, after the GOAWAY: ignored
  });
  OnLoop([&] { client->conn().BreakEncoderForTesting(); });
  std::thread carrier([res] {
    EXPECT_TRUE(res->Write(kBody));  // held until the head goes out
    EXPECT_FALSE(res->Flush());      // the head fails to encode
    res->End();
  });
  carrier.join();
  OnLoop([&] {
    const Answers second = client->Read();
    EXPECT_TRUE(second.goaway);
    EXPECT_EQ(second.goaway_code, static_cast<uint32_t>(ErrorCode::kInternalError));
    EXPECT_EQ(second.goaway_last_id, 1u);
    EXPECT_TRUE(second.closed.empty());
  });
  EndAll({client.get()});
}

// A peer that opens streams and does not read: a handler on the loop writes its whole body at
// once, so without a bound every stream's body would wait in memory for the peer's window.
TEST_F(ConnectionTest, WhileStreamsOutputWaitsForWindowNewStreamsWaitForThePeerToTakeIt) {
  int runs = 0;
  AddBigAnswer(dispatcher_, &runs);
  for (OutputStrategy strategy :
       {OutputStrategy::kTwoLocks, OutputStrategy::kSingleLock, OutputStrategy::kQueue}) {
    SCOPED_TRACE(OutputStrategyName(strategy));
    runs = 0;
    ConnectionCounters counters;
    ConnectionOptions options = HoldingAfterTwoBigAnswers();
    options.output.strategy = strategy;
    SpareStreams spares;
    std::unique_ptr<Client> client = Connect(&spares, &counters, options);
    std::vector<uint32_t> ids;
    OnLoop([&] { ids = client->Send(BigGet(), 6); });
    // Two bodies wait for window, 334,465 bytes; the other four handlers wait for them.
    EXPECT_EQ(runs, 2);
    EXPECT_EQ(counters.held_streams.load(), 4u);
    // A held stream the peer resets is not dispatched when its turn comes.
    OnLoop([&] {
      (void)client->Read();
      std::string reset;
      AppendRstStream(ids[2], ErrorCode::kCancel, &reset);
      client->SendFrames(reset);
    });
    EXPECT_EQ(runs, 2);
    // The peer opens its windows: the waiting output goes, then the held streams run in turn.
    std::vector<uint32_t> closed;
    OnLoop([&] {
      const Answers first = client->Read();
      closed = first.closed;
      client->SendFrames(OpenAllWindows());
    });
    OnLoop([&] {
      const Answers rest = client->Read();
      closed.insert(closed.end(), rest.closed.begin(), rest.closed.end());
    });
    EXPECT_EQ(runs, 5);
    std::sort(closed.begin(), closed.end());
    EXPECT_EQ(closed, (std::vector<uint32_t>{ids[0], ids[1], ids[3], ids[4], ids[5]}));
    EndAll({client.get()});
  }
}

// A dispatcher whose exchanges report to hooks, and a listener that keeps what it heard.
class HookedDispatcher : public http::RouterDispatcher {
 public:
  telemetry::Hooks* hooks() override { return &hooks_; }

 private:
  telemetry::Hooks hooks_;
};

class StopRecorder : public telemetry::Listener {
 public:
  void OnRequestStop(const telemetry::ExchangeRecord& r) override {
    stops.push_back(std::string(r.method) + " " + std::to_string(r.status) + " " +
                    std::string(telemetry::ErrorTypeName(r.error, r.error_code, true)));
    durations_ns.push_back(r.duration_ns);
  }
  std::vector<std::string> stops;  // the loop's (the test's thread)
  std::vector<uint64_t> durations_ns;
};

// A client (not yet started) over a dispatcher with /big whose stops `recorder` keeps, holding
// new streams back after two big answers.
struct HookedClient {
  HookedClient(EventLoop* loop, MemoryPool* pool) {
    AddBigAnswer(dispatcher);
    dispatcher.hooks()->Subscribe(recorder);
    client = std::make_unique<Client>(loop, pool, &dispatcher, &counters, &spares,
                                      HoldingAfterTwoBigAnswers());
  }
  HookedDispatcher dispatcher;
  std::shared_ptr<StopRecorder> recorder = std::make_shared<StopRecorder>();
  ConnectionCounters counters;
  SpareStreams spares;
  std::unique_ptr<Client> client;
};

// A held-back stream that never reaches its handler still shows in telemetry: reset by the peer,
// or dropped with its connection.
TEST_F(ConnectionTest, AHeldStreamThatNeverRunsIsReportedWithWhatEndedIt) {
  HookedClient hooked(loop_.get(), &pool_);
  // Named references, not a structured binding: the lambdas below capture them (clang 14 cannot
  // capture a binding).
  auto& client = hooked.client;
  auto& recorder = hooked.recorder;
  auto& counters = hooked.counters;
  OnLoop([&] { client->Start(); });
  std::vector<uint32_t> ids;
  OnLoop([&] { ids = client->Send(BigGet(), 4); });
  ASSERT_EQ(counters.held_streams.load(), 2u);
  const size_t ran = recorder->stops.size();
  ASSERT_EQ(ran, 2u);  // the two that ran ended their responses
  OnLoop([&] {
    (void)client->Read();
    std::string reset;
    AppendRstStream(ids[2], ErrorCode::kCancel, &reset);
    client->SendFrames(reset);
  });
  ASSERT_EQ(recorder->stops.size(), ran + 1);
  EXPECT_EQ(recorder->stops.back(), "GET 0 peer_reset");
  EndAll({client.get()});  // the last one goes with its connection
  ASSERT_EQ(recorder->stops.size(), ran + 2);
  EXPECT_EQ(recorder->stops.back(), "GET 0 aborted");
}

// A held-back stream's exchange starts when the stream arrived, not when it ran: the wait is
// part of what the client saw (with a loop that stamps its passes, as a server's with telemetry).
TEST_F(ConnectionTest, AHeldStreamsDurationCountsItsWait) {
  EventLoopOptions loop_options;
  loop_options.stamp_pass_ticks = true;
  auto loop = EventLoop::Create(loop_options);
  ASSERT_TRUE(loop.ok());
  loop_ = std::move(*loop);
  HookedClient hooked(loop_.get(), &pool_);
  // Named references, not a structured binding: the lambdas below capture them (clang 14 cannot
  // capture a binding).
  auto& client = hooked.client;
  auto& recorder = hooked.recorder;
  auto& counters = hooked.counters;
  OnLoop([&] { client->Start(); });
  OnLoop([&] { (void)client->Send(BigGet(), 3); });
  ASSERT_EQ(counters.held_streams.load(), 1u);
  ASSERT_EQ(recorder->durations_ns.size(), 2u);
  // A wait the held stream's duration must cover (the two that ran took far less).
  constexpr auto kWait = std::chrono::milliseconds(30);
  std::this_thread::sleep_for(kWait);
  OnLoop([&] {
    (void)client->Read();
    client->SendFrames(OpenAllWindows());
  });
  OnLoop([&] { (void)client->Read(); });  // the output taken: nothing waits on the peer
  ASSERT_EQ(recorder->durations_ns.size(), 3u);
  EXPECT_GE(recorder->durations_ns[2],
            static_cast<uint64_t>(std::chrono::nanoseconds(kWait).count()));
  EndAll({client.get()});
}

// A connection error's GOAWAY names the last stream that reached a handler, not the held-back
// ones after it: the peer may send those again on a new connection (RFC 9113 §6.8).
TEST_F(ConnectionTest, AConnectionErrorLeavesTheHeldStreamsOutOfItsGoaway) {
  ConnectionOptions options = HoldingAfterTwoBigAnswers();
  options.max_body_bytes = 1'000;
  ConnectionCounters counters;
  SpareStreams spares;
  std::vector<uint32_t> ids;
  std::unique_ptr<Client> client = FiveBigGets(options, &counters, &spares, &ids);
  Answers answers;
  OnLoop([&] {
    (void)client->Read();
    // Answered by the connection (413) after the held ones: it does not lift the last id.
    (void)client->Send({{":method", "POST"},
                        {":path", "/echo"},
                        {":scheme", "http"},
                        {":authority", "a"},
                        {"content-length", "5000"}},
                       1, /*end_stream=*/false);
  });
  ASSERT_EQ(counters.body_too_large.load(), 1u);
  OnLoop([&] {
    (void)client->Read();
    std::string bad;
    AppendWindowUpdate(0, 0, &bad);  // a zero increment on the connection: PROTOCOL_ERROR
    client->SendFrames(bad);
  });
  OnLoop([&] { answers = client->Read(); });
  EXPECT_TRUE(answers.goaway);
  EXPECT_EQ(answers.goaway_code, static_cast<uint32_t>(ErrorCode::kProtocolError));
  EXPECT_EQ(answers.goaway_last_id, ids[1]);
  EndAll({client.get()});
}

// A graceful shutdown does not keep held-back streams waiting for a slow reader: each gets
// REFUSED_STREAM (not processed: the peer may send it again elsewhere), and the GOAWAY names the
// last stream that ran.
TEST_F(ConnectionTest, AShutdownRefusesTheHeldStreams) {
  ConnectionCounters counters;
  SpareStreams spares;
  std::vector<uint32_t> ids;
  std::unique_ptr<Client> client =
      FiveBigGets(HoldingAfterTwoBigAnswers(), &counters, &spares, &ids);
  Answers answers;
  OnLoop([&] {
    (void)client->Read();
    client->conn().BeginShutdown();
    answers = client->Read();
  });
  EXPECT_EQ(answers.resets, (std::vector<uint32_t>{ids[2], ids[3], ids[4]}));
  EXPECT_TRUE(answers.goaway);
  EXPECT_EQ(answers.goaway_code, static_cast<uint32_t>(ErrorCode::kNoError));
  EXPECT_EQ(answers.goaway_last_id, ids[1]);
  EndAll({client.get()});
}

// Both bounds must be passed: one long download to a slow reader (one stream over its share) and
// a few answers over their share but under the bytes (8 of 200,000 bytes) hold nothing back.
TEST_F(ConnectionTest, OneLongDownloadOrAFewLargeAnswersHoldNoStreamBack) {
  for (size_t body : {size_t{5'000'000}, size_t{200'000}}) {
    SCOPED_TRACE(body);
    ASSERT_TRUE(
        dispatcher_
            .Add("GET", "/large/" + std::to_string(body),
                 [body](http::Request&, http::Response& res) { res.Write(std::string(body, 'x')); })
            .ok());
    const int large = body > 1'000'000 ? 1 : 8;
    ConnectionCounters counters;
    SpareStreams spares;
    std::unique_ptr<Client> client = Connect(&spares, &counters);  // the default bounds
    OnLoop([&] {
      client->Send({{":method", "GET"},
                    {":path", "/large/" + std::to_string(body)},
                    {":scheme", "http"},
                    {":authority", "a"}},
                   large);
    });
    OnLoop([&] { (void)client->Read(); });   // what the window let out: the output is not paused
    OnLoop([&] { (void)client->Get(20); });  // 13 bytes each, behind the others for the window
    EXPECT_EQ(counters.held_streams.load(), 0u);
    EXPECT_EQ(counters.requests.load(), static_cast<uint64_t>(large + 20));
    EndAll({client.get()});
  }
}

// The connection gives up on a peer that keeps its window shut (a timer, outside any pass) while
// a handler still waits for the request's body. The body's end reaches the handler, whose last
// write wakes the writer's events at once: the streams the close retired are recycled under the
// close's feet, and the close must still hold what it goes on using (AddressSanitizer's finding
// when it did not).
TEST_F(ConnectionTest, AStreamWhoseHandlerEndsItAsTheConnectionGivesUpOnAStalledPeerIsHeldToTheEnd) {
  bool body_ended = false;
  ASSERT_TRUE(dispatcher_
                  .Add("POST", "/stalled",
                       [&body_ended](http::Request& req, http::Response& res) {
                         res.DeferEnd();
                         // More than the peer's initial window: the rest waits for an update.
                         res.Write(std::string(70'000, 'x'));
                         req.ReadBody([](std::span<const uint8_t>) {},
                                      [&body_ended, &res](Status) {
                                        body_ended = true;
                                        res.End();
                                      });
                       })
                  .ok());
  ConnectionOptions options;
  options.limits.window_stall_timeout = std::chrono::milliseconds(20);
  SpareStreams spares;
  std::unique_ptr<Client> client = Connect(&spares, nullptr, options);
  OnLoop([&] {
    client->Send({{":method", "POST"}, {":path", "/stalled"}, {":scheme", "http"},
                  {":authority", "a"}},
                 1, /*end_stream=*/false);
  });
  // Until the stall timer has fired and the connection has said GOAWAY (10 s at most).
  bool goaway = false;
  for (int i = 0; i < 500 && !goaway; ++i) {
    loop_->RunAfter(std::chrono::milliseconds(20), [this] { loop_->Stop(); });
    loop_->Run();
    OnLoop([&] { goaway = client->Read().goaway; });
  }
  EXPECT_TRUE(goaway);
  EXPECT_TRUE(body_ended);
  EndAll({client.get()});
}

}  // namespace
}  // namespace sluice::http2
