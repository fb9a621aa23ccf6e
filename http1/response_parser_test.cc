#include "http1/response_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/pipe.h"
#include "core/testing.h"
#include "http1/testing/segmented_input.h"

namespace sluice::http1 {
namespace {

using ::sluice::http1::testing::SegmentedInput;
using ::testing::HasSubstr;

class ResponseParserTest : public ::sluice::testing::DiagnosticPoolTest {};

// Every field of a head, for comparing results of differently split inputs.
std::string Describe(const ResponseHead& h) {
  std::string s = "code=" + std::to_string(h.status_code) + " reason='" + std::string(h.reason) +
                  "' minor=" + std::to_string(h.version_minor) +
                  " framing=" + std::to_string(static_cast<int>(h.framing)) +
                  " length=" + std::to_string(h.content_length) +
                  " keep_alive=" + std::to_string(h.keep_alive);
  for (const Header& f : h.headers) {
    s += " [" + std::string(f.name) + "|" + std::string(f.value) + "]";
  }
  return s;
}

std::string Describe(const ResponseParseOutcome& r) {
  return "status=" + std::to_string(static_cast<int>(r.status)) +
         " consumed=" + std::to_string(r.consumed) +
         " interim=" + std::to_string(r.interim_responses) + " " + r.ToStatus().ToString();
}

ResponseParseOutcome ParseOnce(std::string_view response, ResponseHead* head,
                               bool head_request = false, ResponseParseLimits limits = {}) {
  ResponseParser parser(limits);
  return parser.Parse(response, head_request, head);
}

void ExpectRejected(std::string_view response, StatusCode code, std::string_view reason,
                    ResponseParseLimits limits = {}) {
  ResponseHead head;
  const ResponseParseOutcome r = ParseOnce(response, &head, false, limits);
  EXPECT_TRUE(r.error()) << Describe(r) << "\nfor: " << response;
  EXPECT_EQ(r.error_code, code) << Describe(r) << "\nfor: " << response;
  EXPECT_THAT(std::string(r.reason), HasSubstr(std::string(reason))) << response;
}

bool Inside(std::string_view v, std::string_view input) {
  return v.data() >= input.data() && v.data() + v.size() <= input.data() + input.size();
}

TEST_F(ResponseParserTest, ParsesContentLengthResponseInPlace) {
  const std::string_view response =
      "HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length: 13\r\n"
      "Content-Type: text/plain\r\n\r\nHello, World!";
  ResponseHead head;
  const ResponseParseOutcome r = ParseOnce(response, &head);
  ASSERT_TRUE(r.complete()) << Describe(r);
  EXPECT_EQ(r.consumed, response.size() - 13);
  EXPECT_EQ(head.status_code, 200);
  EXPECT_EQ(head.reason, "OK");
  EXPECT_EQ(head.version_minor, 1);
  EXPECT_EQ(head.framing, ResponseFraming::kContentLength);
  EXPECT_EQ(head.content_length, 13u);
  EXPECT_TRUE(head.keep_alive);
  ASSERT_EQ(head.headers.size(), 3u);
  EXPECT_EQ(head.Find("content-type"), "text/plain");
  EXPECT_EQ(head.Find("x-missing"), "");
  EXPECT_TRUE(Inside(head.reason, response));
  for (const Header& h : head.headers) {
    EXPECT_TRUE(Inside(h.name, response) && Inside(h.value, response));
  }
}

TEST_F(ResponseParserTest, ParsesChunkedResponse) {
  ResponseHead head;
  const ResponseParseOutcome r = ParseOnce(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", &head);
  ASSERT_TRUE(r.complete()) << Describe(r);
  EXPECT_EQ(head.framing, ResponseFraming::kChunked);
  EXPECT_TRUE(head.keep_alive);
}

TEST_F(ResponseParserTest, WithoutLengthReadsUntilCloseAndIsNotKeepAlive) {
  ResponseHead head;
  ASSERT_TRUE(ParseOnce("HTTP/1.1 200 OK\r\nServer: x\r\n\r\nbody", &head).complete());
  EXPECT_EQ(head.framing, ResponseFraming::kUntilClose);
  EXPECT_FALSE(head.keep_alive);
}

TEST_F(ResponseParserTest, TransferCodingWithoutFinalChunkedReadsUntilClose) {
  ResponseHead head;
  ASSERT_TRUE(
      ParseOnce("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", &head).complete());
  EXPECT_EQ(head.framing, ResponseFraming::kUntilClose);
  EXPECT_FALSE(head.keep_alive);
}

TEST_F(ResponseParserTest, HeadResponseHasNoBody) {
  ResponseHead head;
  ASSERT_TRUE(
      ParseOnce("HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n", &head, /*head_request=*/true)
          .complete());
  EXPECT_EQ(head.framing, ResponseFraming::kNone);
  EXPECT_EQ(head.content_length, 0u);
  EXPECT_TRUE(head.keep_alive);
  ASSERT_TRUE(
      ParseOnce("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", &head, true).complete());
  EXPECT_EQ(head.framing, ResponseFraming::kNone);
}

TEST_F(ResponseParserTest, NoContentAndNotModifiedHaveNoBody) {
  for (std::string_view response : {"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
                                    "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
                                    "HTTP/1.1 204 No Content\r\n\r\n"}) {
    ResponseHead head;
    ASSERT_TRUE(ParseOnce(response, &head).complete()) << response;
    EXPECT_EQ(head.framing, ResponseFraming::kNone) << response;
    EXPECT_TRUE(head.keep_alive) << response;
  }
}

TEST_F(ResponseParserTest, SkipsInterimResponses) {
  const std::string_view response =
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
      "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n";
  ResponseHead head;
  ResponseParser parser;
  const ResponseParseOutcome r = parser.Parse(response, false, &head);
  ASSERT_TRUE(r.complete()) << Describe(r);
  EXPECT_EQ(r.consumed, response.size());
  EXPECT_EQ(r.interim_responses, 2u);
  EXPECT_EQ(head.status_code, 201);
  EXPECT_EQ(head.headers.size(), 1u);
  EXPECT_EQ(parser.counters().interim_responses, 2u);
  EXPECT_EQ(parser.counters().responses, 1u);
}

TEST_F(ResponseParserTest, InterimResponseAloneIsIncomplete) {
  ResponseHead head;
  ResponseParser parser;
  EXPECT_TRUE(parser.Parse("HTTP/1.1 100 Continue\r\n\r\n", false, &head).incomplete());
  // Resumes after the skipped interim head.
  const ResponseParseOutcome r = parser.Parse(
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, &head);
  ASSERT_TRUE(r.complete()) << Describe(r);
  EXPECT_EQ(head.status_code, 200);
  EXPECT_EQ(r.interim_responses, 1u);
}

TEST_F(ResponseParserTest, SwitchingProtocolsIsReturnedAndEndsKeepAlive) {
  ResponseHead head;
  ASSERT_TRUE(
      ParseOnce("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", &head).complete());
  EXPECT_EQ(head.status_code, 101);
  EXPECT_EQ(head.framing, ResponseFraming::kNone);
  EXPECT_FALSE(head.keep_alive);
}

TEST_F(ResponseParserTest, RejectsTooManyInterimResponses) {
  std::string response;
  for (int i = 0; i < 3; ++i) response += "HTTP/1.1 100 Continue\r\n\r\n";
  ResponseHead head;
  ResponseParser parser({.max_interim_responses = 2});
  const ResponseParseOutcome r = parser.Parse(response, false, &head);
  ASSERT_TRUE(r.error()) << Describe(r);
  EXPECT_EQ(r.error_code, StatusCode::kResourceExhausted);
  EXPECT_EQ(parser.counters().interim_responses_too_many, 1u);
}

TEST_F(ResponseParserTest, KeepAliveFollowsVersionAndConnection) {
  struct Case {
    std::string_view response;
    bool keep_alive;
  };
  for (const Case& c : {
           Case{"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true},
           Case{"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false},
           Case{"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, CLOSE\r\nContent-Length: 0\r\n\r\n",
                false},
           Case{"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false},
           Case{"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", true},
       }) {
    ResponseHead head;
    ASSERT_TRUE(ParseOnce(c.response, &head).complete()) << c.response;
    EXPECT_EQ(head.keep_alive, c.keep_alive) << c.response;
  }
}

TEST_F(ResponseParserTest, AcceptsEmptyOrMissingReason) {
  ResponseHead head;
  ASSERT_TRUE(ParseOnce("HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n", &head).complete());
  EXPECT_EQ(head.status_code, 404);
  EXPECT_EQ(head.reason, "");
  ASSERT_TRUE(ParseOnce("HTTP/1.1 503\r\nContent-Length: 0\r\n\r\n", &head).complete());
  EXPECT_EQ(head.status_code, 503);
  EXPECT_EQ(head.reason, "");
  ASSERT_TRUE(ParseOnce("HTTP/1.1 500 Internal  Server Error\r\n\r\n", &head).complete());
  EXPECT_EQ(head.reason, "Internal  Server Error");
}

TEST_F(ResponseParserTest, RejectsMalformedStatusLines) {
  for (std::string_view response : {
           "HTTP/1.1 20 OK\r\n\r\n",
           "HTTP/1.1  200 OK\r\n\r\n",
           "HTTP/1.1 2000 OK\r\n\r\n",
           "http/1.1 200 OK\r\n\r\n",
           "HTTP/1.1\r\n\r\n",
           "HTTP/11 200 OK\r\n\r\n",
           "HTTP/1.1 200\tOK\r\n\r\n",
           "ICY 200 OK\r\n\r\n",
           "HTTP/1.1 200 O\x01K\r\n\r\n",
       }) {
    ResponseHead head;
    const ResponseParseOutcome r = ParseOnce(response, &head);
    EXPECT_TRUE(r.error()) << Describe(r) << " for " << response;
    EXPECT_EQ(r.error_code, StatusCode::kInvalidArgument) << response;
  }
  ExpectRejected("HTTP/1.1 099 Weird\r\n\r\n", StatusCode::kInvalidArgument, "status code");
  ExpectRejected("HTTP/1.1 600 Weird\r\n\r\n", StatusCode::kInvalidArgument, "status code");
  ExpectRejected("HTTP/2.0 200 OK\r\n\r\n", StatusCode::kInvalidArgument, "version");
  ExpectRejected("HTTP/1.2 200 OK\r\n\r\n", StatusCode::kInvalidArgument, "version");
  ExpectRejected("\r\nHTTP/1.1 200 OK\r\n\r\n", StatusCode::kInvalidArgument, "empty line");
}

TEST_F(ResponseParserTest, RejectsAmbiguousFraming) {
  ExpectRejected("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                 StatusCode::kInvalidArgument, "Transfer-Encoding with Content-Length");
  ExpectRejected("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                 StatusCode::kInvalidArgument, "HTTP/1.0");
  ExpectRejected("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
                 StatusCode::kInvalidArgument, "repeated Content-Length");
  ExpectRejected("HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n", StatusCode::kInvalidArgument,
                 "invalid Content-Length");
  ExpectRejected("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", StatusCode::kInvalidArgument,
                 "invalid Content-Length");
  ExpectRejected("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
                 StatusCode::kInvalidArgument, "invalid Content-Length");
  ExpectRejected("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
                 StatusCode::kInvalidArgument, "more than once");
  ExpectRejected("HTTP/1.1 200 OK\r\nTransfer-Encoding: ,\r\n\r\n", StatusCode::kInvalidArgument,
                 "empty Transfer-Encoding");
}

TEST_F(ResponseParserTest, RejectsMalformedFieldsAndLineEndings) {
  ExpectRejected("HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n", StatusCode::kInvalidArgument,
                 "bare LF");
  ExpectRejected("HTTP/1.1 200 OK\r\nContent-Length: 0\n\r\n", StatusCode::kInvalidArgument,
                 "bare LF");
  ExpectRejected("HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n", StatusCode::kInvalidArgument, "");
  ExpectRejected("HTTP/1.1 200 OK\r\nA : b\r\n\r\n", StatusCode::kInvalidArgument, "");
  ExpectRejected("HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n", StatusCode::kInvalidArgument, "");
  ExpectRejected(std::string_view("HTTP/1.1 200 OK\r\nA: b\0c\r\n\r\n", 27),
                 StatusCode::kInvalidArgument, "");
}

TEST_F(ResponseParserTest, EnforcesLimitsEvenWhileIncomplete) {
  const ResponseParseLimits small{.max_status_line = 32,
                                  .max_header_bytes = 64,
                                  .max_header_count = 3,
                                  .max_interim_responses = 1};
  ResponseHead head;
  {
    ResponseParser parser(small);
    const ResponseParseOutcome r =
        parser.Parse("HTTP/1.1 200 " + std::string(40, 'x'), false, &head);
    ASSERT_TRUE(r.error()) << Describe(r);
    EXPECT_EQ(r.error_code, StatusCode::kResourceExhausted);
    EXPECT_EQ(parser.counters().status_line_too_long, 1u);
  }
  {
    ResponseParser parser(small);
    const ResponseParseOutcome r =
        parser.Parse("HTTP/1.1 200 OK\r\nX: " + std::string(80, 'y'), false, &head);
    ASSERT_TRUE(r.error()) << Describe(r);
    EXPECT_EQ(parser.counters().header_bytes_too_large, 1u);
  }
  {
    ResponseParser parser(small);
    const ResponseParseOutcome r =
        parser.Parse("HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n", false, &head);
    ASSERT_TRUE(r.error()) << Describe(r);
    EXPECT_EQ(parser.counters().header_count_too_large, 1u);
  }
  {
    // Exactly at the limits is fine.
    ResponseParser parser(small);
    const std::string line = "HTTP/1.1 200 " + std::string(32 - 13, 'r');
    EXPECT_TRUE(parser.Parse(line + "\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", false, &head).complete());
  }
}

TEST_F(ResponseParserTest, ParsesPipelinedResponsesInOneBuffer) {
  const std::string one = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
  const std::string chunked = "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n";
  SegmentedInput input(&pool());
  input.Append(one + one + chunked);
  const BufferSequence& buffer = input.Read();
  ResponseParser parser;
  ResponseHead head;
  size_t offset = 0;
  std::vector<uint16_t> codes;
  while (offset < buffer.size()) {
    const ResponseParseOutcome r = parser.Parse(buffer, offset, false, &head);
    ASSERT_TRUE(r.complete()) << Describe(r);
    codes.push_back(head.status_code);
    offset += r.consumed;
    if (head.framing == ResponseFraming::kContentLength) offset += head.content_length;
  }
  EXPECT_EQ(codes, (std::vector<uint16_t>{200, 200, 404}));
  EXPECT_EQ(parser.counters().responses, 3u);
  input.Consume(buffer.size());
}

TEST_F(ResponseParserTest, ErrorsAsStatuses) {
  ResponseHead head;
  const ResponseParseOutcome r = ParseOnce("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", &head);
  const Status status = r.ToStatus();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("Content-Length"));
  EXPECT_TRUE(ParseOnce("HTTP/1.1 200 OK\r\n\r\n", &head).ToStatus().ok());
}

// The inputs the split tests run over: each one complete response (its head, then maybe body).
const std::vector<std::string>& SplitCases() {
  static const std::vector<std::string> cases = {
      "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Mon, 30 Nov 2026 05:36:12 GMT\r\n"
      "Content-Type: text/plain\r\nContent-Length: 13\r\nConnection: keep-alive\r\n\r\n",
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
      "HTTP/1.0 404 Not Found\r\nConnection: close\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",  // an error
      "HTTP/1.1 200 OK\r\nA: b\nC: d\r\n\r\n",                              // an error
      "HTTP/1.1 204\r\n\r\n",
  };
  return cases;
}

struct Parsed {
  std::string outcome;
  std::string head;
};

Parsed ParseContiguous(std::string_view input) {
  ResponseParser parser;
  ResponseHead head;
  const ResponseParseOutcome r = parser.Parse(input, false, &head);
  return {Describe(r), r.complete() ? Describe(head) : ""};
}

TEST_F(ResponseParserTest, SplitAtEveryByteIntoTwoSegmentsGivesTheSameResult) {
  for (const std::string& input : SplitCases()) {
    const Parsed expected = ParseContiguous(input);
    for (size_t split = 1; split < input.size(); ++split) {
      SegmentedInput segments(&pool(), {std::string_view(input).substr(0, split),
                                        std::string_view(input).substr(split)});
      ResponseParser parser;
      ResponseHead head;
      const ResponseParseOutcome r = parser.Parse(segments.Read(), 0, false, &head);
      EXPECT_EQ(Describe(r), expected.outcome) << "split at " << split << " of " << input;
      if (r.complete()) {
        EXPECT_EQ(Describe(head), expected.head) << "split at " << split << " of " << input;
      }
      segments.Consume(0);
    }
  }
}

TEST_F(ResponseParserTest, FedOneByteAtATimeGivesTheSameResult) {
  for (const std::string& input : SplitCases()) {
    const Parsed expected = ParseContiguous(input);
    SegmentedInput segments(&pool());
    ResponseParser parser;
    ResponseHead head;
    ResponseParseOutcome r;
    for (size_t i = 0; i < input.size(); ++i) {
      segments.Break();  // every byte in its own segment
      segments.Append(std::string_view(input).substr(i, 1));
      r = parser.Parse(segments.Read(), 0, false, &head);
      if (!r.incomplete()) break;
      segments.Consume(0);
    }
    EXPECT_EQ(Describe(r), expected.outcome) << input;
    if (r.complete()) {
      EXPECT_EQ(Describe(head), expected.head) << input;
      EXPECT_GT(parser.counters().linearized, 0u);
    }
  }
}

TEST_F(ResponseParserTest, ResumedParseAtAnOffsetAfterEarlierResponses) {
  // A first response consumed, the second arriving byte by byte behind it.
  const std::string first = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
  const std::string second = "HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n";
  SegmentedInput segments(&pool());
  segments.Append(first);
  ResponseParser parser;
  ResponseHead head;
  ResponseParseOutcome r = parser.Parse(segments.Read(), 0, false, &head);
  ASSERT_TRUE(r.complete());
  const size_t offset = r.consumed;
  for (size_t i = 0; i < second.size(); ++i) {
    segments.Consume(0);
    segments.Append(std::string_view(second).substr(i, 1));
    r = parser.Parse(segments.Read(), offset, false, &head);
    if (!r.incomplete()) break;
  }
  ASSERT_TRUE(r.complete()) << Describe(r);
  EXPECT_EQ(head.status_code, 500);
  EXPECT_EQ(r.consumed, second.size());
  segments.Consume(0);
}

TEST_F(ResponseParserTest, OffsetPastTheEndIsAnError) {
  SegmentedInput segments(&pool());
  segments.Append("HTTP/1.1");
  ResponseParser parser;
  ResponseHead head;
  const ResponseParseOutcome r = parser.Parse(segments.Read(), 100, false, &head);
  EXPECT_TRUE(r.error());
  segments.Consume(0);
}

}  // namespace
}  // namespace sluice::http1
