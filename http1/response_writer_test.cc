#include "http1/response_writer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/pipe.h"
#include "core/testing.h"
#include "http/date_cache.h"
#include "http1/field.h"

namespace sluice::http1 {
namespace {

constexpr std::string_view kDate = "Sun, 06 Nov 1994 08:49:37 GMT";

class ResponseWriterTest : public ::sluice::testing::DiagnosticPoolTest {
 protected:
  // Flushes everything written so far and returns it.
  static std::string Drain(Pipe& pipe) {
    FlushResult flushed;
    EXPECT_TRUE(pipe.writer().Flush(&flushed, nullptr));
    ReadResult read;
    if (!pipe.reader().Read(&read, nullptr)) return "";
    std::string out = read.buffer.ToString();
    EXPECT_TRUE(pipe.reader().AdvanceTo(read.buffer.size()).ok());
    return out;
  }
};

TEST_F(ResponseWriterTest, WritesStatusLineDateFieldsAndContentLength) {
  Pipe pipe({.pool = &pool()});
  const Header fields[] = {{"Content-Type", "text/plain"}, {"Server", "sluice"}};
  ASSERT_TRUE(WriteResponseHead(
                  {.status_code = 200, .headers = fields, .content_length = 13, .date = kDate},
                  &pipe.writer())
                  .ok());
  ASSERT_TRUE(pipe.writer().Write("Hello, World!").ok());
  EXPECT_EQ(Drain(pipe),
            "HTTP/1.1 200 OK\r\n"
            "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
            "Content-Type: text/plain\r\n"
            "Server: sluice\r\n"
            "Content-Length: 13\r\n"
            "\r\n"
            "Hello, World!");
}

TEST_F(ResponseWriterTest, WritesChunkedFramingAndChunks) {
  Pipe pipe({.pool = &pool()});
  ASSERT_TRUE(
      WriteResponseHead({.status_code = 201, .framing = ResponseFraming::kChunked, .date = kDate},
                        &pipe.writer())
          .ok());
  ASSERT_TRUE(WriteChunk("hello", &pipe.writer()).ok());
  ASSERT_TRUE(WriteChunk(std::string(300, 'x'), &pipe.writer()).ok());
  ASSERT_TRUE(WriteChunk("", &pipe.writer()).ok());  // writes nothing
  const Header trailers[] = {{"X-Checksum", "abc"}};
  ASSERT_TRUE(WriteLastChunk(trailers, &pipe.writer()).ok());
  EXPECT_EQ(Drain(pipe),
            "HTTP/1.1 201 Created\r\n"
            "Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
            "Transfer-Encoding: chunked\r\n"
            "\r\n"
            "5\r\nhello\r\n"
            "12c\r\n" +
                std::string(300, 'x') +
                "\r\n"
                "0\r\nX-Checksum: abc\r\n\r\n");
}

TEST_F(ResponseWriterTest, WritesLastChunkWithoutTrailers) {
  Pipe pipe({.pool = &pool()});
  ASSERT_TRUE(WriteLastChunk({}, &pipe.writer()).ok());
  EXPECT_EQ(Drain(pipe), "0\r\n\r\n");
}

TEST_F(ResponseWriterTest, WritesConnectionOptions) {
  Pipe pipe({.pool = &pool()});
  ASSERT_TRUE(WriteResponseHead({.status_code = 400,
                                 .content_length = 0,
                                 .connection = ConnectionOption::kClose,
                                 .date = kDate},
                                &pipe.writer())
                  .ok());
  EXPECT_EQ(Drain(pipe),
            "HTTP/1.1 400 Bad Request\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
            "Content-Length: 0\r\nConnection: close\r\n\r\n");
  ASSERT_TRUE(WriteResponseHead({.status_code = 200,
                                 .content_length = 2,
                                 .connection = ConnectionOption::kKeepAlive,
                                 .date = kDate},
                                &pipe.writer())
                  .ok());
  EXPECT_EQ(Drain(pipe),
            "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
            "Content-Length: 2\r\nConnection: keep-alive\r\n\r\n");
}

TEST_F(ResponseWriterTest, WritesResponsesWithoutBodyFraming) {
  Pipe pipe({.pool = &pool()});
  ASSERT_TRUE(
      WriteResponseHead({.status_code = 204, .framing = ResponseFraming::kNone, .date = kDate},
                        &pipe.writer())
          .ok());
  ASSERT_TRUE(WriteContinue(&pipe.writer()).ok());
  EXPECT_EQ(Drain(pipe),
            "HTTP/1.1 204 No Content\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n\r\n"
            "HTTP/1.1 100 Continue\r\n\r\n");
}

TEST_F(ResponseWriterTest, UsesCustomAndMissingReasonPhrases) {
  Pipe pipe({.pool = &pool()});
  ASSERT_TRUE(WriteResponseHead({.status_code = 599, .date = kDate}, &pipe.writer()).ok());
  ASSERT_TRUE(
      WriteResponseHead({.status_code = 200, .reason = "Fine", .date = kDate}, &pipe.writer())
          .ok());
  const std::string out = Drain(pipe);
  EXPECT_EQ(out.substr(0, 15), "HTTP/1.1 599 \r\n");
  EXPECT_NE(out.find("HTTP/1.1 200 Fine\r\n"), std::string::npos);
  EXPECT_EQ(ReasonPhrase(404), "Not Found");
  EXPECT_EQ(ReasonPhrase(431), "Request Header Fields Too Large");
  EXPECT_EQ(ReasonPhrase(799), "");
}

TEST_F(ResponseWriterTest, UsesThisThreadsDateByDefault) {
  Pipe pipe({.pool = &pool()});
  ASSERT_TRUE(WriteResponseHead({.status_code = 200}, &pipe.writer()).ok());
  const std::string out = Drain(pipe);
  // "HTTP/1.1 200 OK\r\n" then "Date: " and 29 bytes of IMF-fixdate. The second may have turned
  // since, so only the shape is checked.
  ASSERT_GT(out.size(), 17u + 6u + 29u + 2u);
  EXPECT_EQ(out.substr(17, 6), "Date: ");
  EXPECT_EQ(out.substr(17 + 6 + 25, 6), " GMT\r\n");
}

TEST_F(ResponseWriterTest, RejectsResponseSplitting) {
  Pipe pipe({.pool = &pool()});
  const Header crlf[] = {{"X", "a\r\nSet-Cookie: evil"}};
  EXPECT_EQ(WriteResponseHead({.headers = crlf, .date = kDate}, &pipe.writer()).code(),
            StatusCode::kInvalidArgument);
  const Header nul[] = {{"X", std::string_view("a\0b", 3)}};
  EXPECT_EQ(WriteResponseHead({.headers = nul, .date = kDate}, &pipe.writer()).code(),
            StatusCode::kInvalidArgument);
  const Header bad_name[] = {{"X Y", "v"}};
  EXPECT_EQ(WriteResponseHead({.headers = bad_name, .date = kDate}, &pipe.writer()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteResponseHead({.reason = "OK\r\nX: y", .date = kDate}, &pipe.writer()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteResponseHead({.date = "today\r\nX: y"}, &pipe.writer()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteLastChunk(crlf, &pipe.writer()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pipe.writer().unflushed_bytes(), 0u);
}

// The writer checks only the reason and Date a caller supplies: its own must be valid field text
// for every status it can write.
TEST_F(ResponseWriterTest, TheStandardReasonPhrasesAreValidFieldText) {
  for (uint16_t code = 100; code <= 999; ++code) {
    const std::string_view reason = ReasonPhrase(code);
    for (char c : reason) {
      ASSERT_TRUE(IsFieldValueChar(static_cast<uint8_t>(c))) << code << " " << reason;
    }
  }
}

TEST_F(ResponseWriterTest, RejectsFramingFieldsFromCaller) {
  Pipe pipe({.pool = &pool()});
  const Header length[] = {{"content-length", "5"}};
  EXPECT_EQ(WriteResponseHead({.headers = length, .date = kDate}, &pipe.writer()).code(),
            StatusCode::kInvalidArgument);
  const Header encoding[] = {{"Transfer-Encoding", "chunked"}};
  EXPECT_EQ(WriteResponseHead({.headers = encoding, .date = kDate}, &pipe.writer()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(pipe.writer().unflushed_bytes(), 0u);
}

TEST_F(ResponseWriterTest, RejectsInvalidStatusAndFraming) {
  Pipe pipe({.pool = &pool()});
  EXPECT_EQ(WriteResponseHead({.status_code = 99, .date = kDate}, &pipe.writer()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteResponseHead({.status_code = 1000, .date = kDate}, &pipe.writer()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteResponseHead({.status_code = 204, .date = kDate}, &pipe.writer()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      WriteResponseHead({.status_code = 101, .framing = ResponseFraming::kChunked, .date = kDate},
                        &pipe.writer())
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(pipe.writer().unflushed_bytes(), 0u);
}

TEST_F(ResponseWriterTest, FailsAfterWriterCompleted) {
  Pipe pipe({.pool = &pool()});
  pipe.writer().Complete();
  EXPECT_EQ(WriteResponseHead({.date = kDate}, &pipe.writer()).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_FALSE(WriteChunk("x", &pipe.writer()).ok());
  EXPECT_FALSE(WriteLastChunk({}, &pipe.writer()).ok());
  pipe.reader().Complete();
}

TEST_F(ResponseWriterTest, WritesHeadLargerThanABlock) {
  Pipe pipe({.pool = &pool()});
  const std::string big(6000, 'v');
  const Header fields[] = {{"X-Big", big}};
  ASSERT_TRUE(WriteResponseHead({.headers = fields, .date = kDate}, &pipe.writer()).ok());
  EXPECT_EQ(Drain(pipe), "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nX-Big: " + big +
                             "\r\nContent-Length: 0\r\n\r\n");
}

TEST_F(ResponseWriterTest, CoalescesPipelinedResponsesIntoOneFlush) {
  // Sixteen pipelined responses appended, then one Flush: the reader gets them all in one read,
  // in a handful of segments (what one writev sends).
  Pipe pipe({.pool = &pool()});
  const Header fields[] = {{"Content-Type", "text/plain"}};
  std::string expected;
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(
        WriteResponseHead({.headers = fields, .content_length = 13, .date = kDate}, &pipe.writer())
            .ok());
    ASSERT_TRUE(pipe.writer().Write("Hello, World!").ok());
    expected +=
        "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        "Content-Type: text/plain\r\nContent-Length: 13\r\n\r\nHello, World!";
  }
  EXPECT_EQ(pipe.unconsumed_bytes(), 0u);  // nothing published before the flush
  FlushResult flushed;
  ASSERT_TRUE(pipe.writer().Flush(&flushed, nullptr));
  ReadResult read;
  ASSERT_TRUE(pipe.reader().Read(&read, nullptr));
  EXPECT_EQ(read.buffer.ToString(), expected);
  struct iovec iov[16];
  EXPECT_LE(read.buffer.ToIovecs(0, iov, 16), 2u);  // 16 * 128 bytes: one or two 4 KiB blocks
  ASSERT_TRUE(pipe.reader().AdvanceTo(read.buffer.size()).ok());
}

TEST_F(ResponseWriterTest, WritesTheBodyGivenWithTheHeadRightAfterIt) {
  Pipe pipe({.pool = &pool()});
  const std::string_view body = "Hello, World!";
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(body.data()), 5);
  ASSERT_TRUE(WriteResponseHead({.content_length = body.size(), .date = kDate, .body = bytes},
                                &pipe.writer())
                  .ok());
  ASSERT_TRUE(pipe.writer().Write(body.substr(5)).ok());
  EXPECT_EQ(Drain(pipe),
            "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
            "Content-Length: 13\r\n\r\nHello, World!");
}

TEST_F(ResponseWriterTest, RejectsBodyBytesBeyondTheContentLength) {
  Pipe pipe({.pool = &pool()});
  const std::string_view body = "Hello";
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(body.data()), body.size());
  EXPECT_EQ(
      WriteResponseHead({.content_length = 4, .date = kDate, .body = bytes}, &pipe.writer()).code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteResponseHead({.framing = ResponseFraming::kChunked, .date = kDate, .body = bytes},
                              &pipe.writer())
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(pipe.writer().unflushed_bytes(), 0u);
}

TEST_F(ResponseWriterTest, WritesRememberedFieldsAsWithoutTheMemo) {
  Pipe pipe({.pool = &pool()});
  ResponseFieldsMemo memo;
  const Header first[] = {{"Content-Type", "text/plain"}, {"Server", "sluice"}};
  const Header other[] = {{"Content-Type", "text/html"}};
  const std::span<const Header> none;
  for (std::span<const Header> fields :
       {std::span<const Header>(first), std::span<const Header>(first),
        std::span<const Header>(other), none, none, std::span<const Header>(first)}) {
    ASSERT_TRUE(
        WriteResponseHead({.headers = fields, .content_length = 13, .date = kDate}, &pipe.writer())
            .ok());
    const std::string want = Drain(pipe);
    ASSERT_TRUE(WriteResponseHead({.headers = fields, .content_length = 13, .date = kDate}, &memo,
                                  &pipe.writer())
                    .ok());
    EXPECT_EQ(Drain(pipe), want);
  }
}

TEST_F(ResponseWriterTest, RefusesInvalidFieldsThatDifferFromRememberedOnesInOneByte) {
  // Each differs from the remembered field by one byte, or moves a byte between name and value:
  // the comparison must not let any through unchecked.
  Pipe pipe({.pool = &pool()});
  ResponseFieldsMemo memo;
  const Header valid[] = {{"X-Field", "value: abcdefgh"}};
  const Header crlf[] = {{"X-Field", "value\r\nabcdefgh"}};
  const Header nul[] = {{"X-Field", std::string_view("value: abcdefg\0", 15)}};
  const Header bad_name[] = {{"X-Fiel ", "value: abcdefgh"}};
  const Header shifted[] = {{"X-Field: value", "abcdefgh"}};
  const Header framing[] = {{"Content-Length", "value: a"}};
  const Header two[] = {{"X-Field", "value: abcdefgh"}, {"X", "a\nb"}};
  for (std::span<const Header> invalid :
       {std::span<const Header>(crlf), std::span<const Header>(nul),
        std::span<const Header>(bad_name), std::span<const Header>(shifted),
        std::span<const Header>(framing), std::span<const Header>(two)}) {
    ASSERT_TRUE(WriteResponseHead({.headers = valid, .date = kDate}, &memo, &pipe.writer()).ok());
    ASSERT_TRUE(WriteResponseHead({.headers = valid, .date = kDate}, &memo, &pipe.writer()).ok());
    (void)Drain(pipe);
    EXPECT_EQ(WriteResponseHead({.headers = invalid, .date = kDate}, &memo, &pipe.writer()).code(),
              StatusCode::kInvalidArgument)
        << invalid[0].name << ": " << invalid[0].value;
    EXPECT_EQ(pipe.writer().unflushed_bytes(), 0u);
  }
}

TEST_F(ResponseWriterTest, ChecksFieldsTooLargeToRememberEveryTime) {
  Pipe pipe({.pool = &pool()});
  ResponseFieldsMemo memo;
  const std::string big(ResponseFieldsMemo::kMaxBytes, 'v');
  const Header fields[] = {{"X-Big", big}};
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(WriteResponseHead({.headers = fields, .date = kDate}, &memo, &pipe.writer()).ok());
    EXPECT_EQ(Drain(pipe), "HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\nX-Big: " +
                               big + "\r\nContent-Length: 0\r\n\r\n");
  }
  EXPECT_FALSE(memo.Matches(fields));
  std::string bad = big;
  bad.back() = '\n';
  const Header invalid[] = {{"X-Big", bad}};
  EXPECT_EQ(WriteResponseHead({.headers = invalid, .date = kDate}, &memo, &pipe.writer()).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ResponseWriterTest, MatchesFieldsHeldAsStringPairsByteForByte) {
  Pipe pipe({.pool = &pool()});
  ResponseFieldsMemo memo;
  // Names and values shorter than a word, of one to two words, and longer.
  const Header fields[] = {{"X", "short"},
                           {"Content-Type", "text/plain"},
                           {"X-Long-Field-Name", "a value longer than sixteen bytes"}};
  ASSERT_TRUE(WriteResponseHead({.headers = fields, .date = kDate}, &memo, &pipe.writer()).ok());
  (void)Drain(pipe);
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const Header& h : fields) pairs.emplace_back(h.name, h.value);
  EXPECT_TRUE(memo.Matches(pairs));
  // Any one byte changed, in any field, at any position: no match.
  for (size_t f = 0; f < pairs.size(); ++f) {
    for (int part = 0; part < 2; ++part) {
      std::string& text = part == 0 ? pairs[f].first : pairs[f].second;
      for (size_t i = 0; i < text.size(); ++i) {
        const char was = text[i];
        text[i] = static_cast<char>(was ^ 0x20);
        EXPECT_FALSE(memo.Matches(pairs)) << f << " " << part << " " << i;
        text[i] = was;
      }
    }
  }
  EXPECT_TRUE(memo.Matches(pairs));
  pairs.pop_back();
  EXPECT_FALSE(memo.Matches(pairs));
}

TEST_F(ResponseWriterTest, WritesAMatchedMemosFieldsAsTheFieldsThemselves) {
  Pipe pipe({.pool = &pool()});
  ResponseFieldsMemo memo;
  const Header fields[] = {{"Content-Type", "text/plain"}, {"Server", "sluice"}};
  const std::span<const uint8_t> body(reinterpret_cast<const uint8_t*>("Hello"), 5);
  ASSERT_TRUE(
      WriteResponseHead({.headers = fields, .content_length = 5, .date = kDate, .body = body},
                        &memo, &pipe.writer())
          .ok());
  const std::string want = Drain(pipe);
  ASSERT_TRUE(memo.Matches(fields));
  ASSERT_TRUE(WriteResponseHeadFromMemo({.content_length = 5, .date = kDate, .body = body}, &memo,
                                        &pipe.writer())
                  .ok());
  EXPECT_EQ(Drain(pipe), want);
}

TEST_F(ResponseWriterTest, TakesTheDefaultDateFromAStampWithoutAClockReadPerResponse) {
  Pipe pipe({.pool = &pool()});
  http::DateCache& dates = http::DateCache::ForThisThread();
  const auto stamp = std::chrono::steady_clock::now();
  const uint64_t reads = dates.wall_reads();
  std::string first;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(WriteResponseHead(
                    {.status_code = 204, .framing = ResponseFraming::kNone, .steady_now = stamp},
                    &pipe.writer())
                    .ok());
    const std::string out = Drain(pipe);
    ASSERT_GT(out.size(), 17u + 6u + 29u + 2u) << out;
    const std::string date = out.substr(out.find("Date: ") + 6, 29);
    if (i == 0) first = date;
    // The same stamp: the same date, and the wall clock read at most once for the three.
    EXPECT_EQ(date, first);
    EXPECT_EQ(date, dates.Now(stamp));
  }
  EXPECT_LE(dates.wall_reads(), reads + 1);
}

TEST_F(ResponseWriterTest, RepeatedHeadsAreWrittenAsWithoutTheMemo) {
  // Responses that repeat the last one, and that differ from it in one of what a head is made
  // of (status, reason, Date, length, framing, Connection, fields): each written with the memo
  // (which keeps and copies whole heads) exactly as without it.
  Pipe pipe({.pool = &pool()});
  ResponseFieldsMemo memo;
  const Header fields[] = {{"Content-Type", "text/plain"}};
  const Header other[] = {{"Content-Type", "text/html"}};
  const std::span<const uint8_t> body(reinterpret_cast<const uint8_t*>("Hello, World!"), 13);
  const ResponseHead base{.headers = fields, .content_length = 13, .date = kDate, .body = body};
  std::vector<ResponseHead> heads;
  for (int i = 0; i < 3; ++i) heads.push_back(base);
  ResponseHead h = base;
  h.status_code = 201;
  heads.push_back(h);
  heads.push_back(base);
  h = base;
  h.reason = "Fine";
  heads.push_back(h);
  heads.push_back(base);
  h = base;
  h.date = "Sun, 06 Nov 1994 08:49:38 GMT";
  heads.push_back(h);
  heads.push_back(h);
  heads.push_back(base);
  h = base;
  h.content_length = 14;
  heads.push_back(h);
  heads.push_back(h);
  heads.push_back(base);
  heads.push_back(base);
  h = base;
  h.connection = ConnectionOption::kClose;
  heads.push_back(h);
  heads.push_back(base);
  h = base;
  h.framing = ResponseFraming::kChunked;
  h.body = {};
  heads.push_back(h);
  heads.push_back(h);
  heads.push_back(base);
  h = base;
  h.headers = other;
  heads.push_back(h);
  heads.push_back(h);
  heads.push_back(base);
  heads.push_back(base);
  for (size_t i = 0; i < heads.size(); ++i) {
    ASSERT_TRUE(WriteResponseHead(heads[i], &pipe.writer()).ok());
    const std::string want = Drain(pipe);
    ASSERT_TRUE(WriteResponseHead(heads[i], &memo, &pipe.writer()).ok()) << i;
    EXPECT_EQ(Drain(pipe), want) << i;
    // And through the memo's fields, as a connection does once they matched.
    if (memo.Matches(heads[i].headers)) {
      ResponseHead without_fields = heads[i];
      without_fields.headers = {};
      ASSERT_TRUE(WriteResponseHeadFromMemo(without_fields, &memo, &pipe.writer()).ok()) << i;
      EXPECT_EQ(Drain(pipe), want) << i;
    }
  }
}

}  // namespace
}  // namespace sluice::http1
