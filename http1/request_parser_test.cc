#include "http1/request_parser.h"

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

class RequestParserTest : public ::sluice::testing::DiagnosticPoolTest {};

// Every field of a head, for comparing results of differently split inputs.
std::string Describe(const RequestHead& h) {
  std::string s;
  s += "method=" + std::to_string(static_cast<int>(h.method)) + " '" + std::string(h.method_text);
  s += "' target='" + std::string(h.target) + "' path='" + std::string(h.path);
  s += "' query='" + std::string(h.query) + "' minor=" + std::to_string(h.version_minor);
  s += " framing=" + std::to_string(static_cast<int>(h.framing));
  s += " length=" + std::to_string(h.content_length);
  s += " keep_alive=" + std::to_string(h.keep_alive);
  s += " expect=" + std::to_string(h.expect_continue);
  s += " host='" + std::string(h.host) + "'";
  for (const Header& f : h.headers)
    s += " [" + std::string(f.name) + "|" + std::string(f.value) + "]";
  return s;
}

std::string Describe(const ParseOutcome& r) {
  return "status=" + std::to_string(static_cast<int>(r.status)) +
         " consumed=" + std::to_string(r.consumed) + " code=" + std::to_string(r.status_code) +
         " reason='" + std::string(r.reason) + "'";
}

ParseOutcome ParseOnce(std::string_view request, RequestHead* head, ParseLimits limits = {}) {
  RequestParser parser(limits);
  return parser.Parse(request, head);
}

// Expects `request` (contiguous) to be refused with `code`, and the reason to mention `reason`.
void ExpectRejected(std::string_view request, uint16_t code, std::string_view reason,
                    ParseLimits limits = {}) {
  RequestHead head;
  const ParseOutcome r = ParseOnce(request, &head, limits);
  EXPECT_TRUE(r.error()) << Describe(r) << "\nfor: " << request;
  EXPECT_EQ(r.status_code, code) << Describe(r) << "\nfor: " << request;
  EXPECT_THAT(std::string(r.reason), HasSubstr(std::string(reason))) << request;
}

std::string WithHeaders(std::string_view request_line, std::string_view fields) {
  return std::string(request_line) + "\r\n" + std::string(fields) + "\r\n";
}

// Valid requests, each followed by its body when it has one.
const std::vector<std::string>& ValidRequests() {
  static const auto* requests = new std::vector<std::string>{
      "GET /index.html?lang=en&q=%20x HTTP/1.1\r\n"
      "Host: www.example.com\r\n"
      "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:109.0) Gecko/20100101 Firefox/115.0\r\n"
      "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n"
      "Accept-Language: en-US,en;q=0.5\r\n"
      "Accept-Encoding: gzip, deflate, br\r\n"
      "Connection: keep-alive\r\n"
      "Upgrade-Insecure-Requests: 1\r\n"
      "Cookie: a=1; b=2\r\n"
      "\r\n",
      "POST /submit HTTP/1.1\r\nHost: a.example\r\nContent-Type: text/plain\r\n"
      "Content-Length: 11\r\n\r\nhello world",
      "POST /upload HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n0\r\n\r\n",
      "GET /old HTTP/1.0\r\nConnection: Keep-Alive\r\nAccept: */*\r\n\r\n",
      "OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n",
      "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
      "GET http://example.com:8080/a/b?c=d HTTP/1.1\r\nHost: ignored.example\r\n\r\n",
      "\r\n\r\nPUT /x HTTP/1.1\r\nHost: [::1]:8080\r\nExpect: 100-continue\r\n"
      "X-Tabs:\t tabbed value \t\r\nX-Empty:\r\nX-Obs-Text: caf\xc3\xa9\r\n"
      "Content-Length: 3\r\nConnection: upgrade, close\r\n\r\nabc",
      "DELETE /items/42 HTTP/1.1\r\nhost: lower.example\r\nX-Long: " + std::string(600, 'v') +
          "\r\n\r\n",
  };
  return *requests;
}

TEST_F(RequestParserTest, ParsesBrowserGet) {
  RequestHead head;
  const std::string& request = ValidRequests()[0];
  const ParseOutcome r = ParseOnce(request, &head);
  ASSERT_TRUE(r.complete()) << Describe(r);
  EXPECT_EQ(r.consumed, request.size());
  EXPECT_EQ(head.method, Method::kGet);
  EXPECT_EQ(head.method_text, "GET");
  EXPECT_EQ(head.target, "/index.html?lang=en&q=%20x");
  EXPECT_EQ(head.path, "/index.html");
  EXPECT_EQ(head.query, "lang=en&q=%20x");
  EXPECT_EQ(head.version_minor, 1);
  EXPECT_EQ(head.host, "www.example.com");
  EXPECT_EQ(head.framing, BodyFraming::kNone);
  EXPECT_TRUE(head.keep_alive);
  EXPECT_FALSE(head.expect_continue);
  ASSERT_EQ(head.headers.size(), 8u);
  EXPECT_EQ(head.headers[1], (Header{"User-Agent",
                                     "Mozilla/5.0 (X11; Linux x86_64; rv:109.0) Gecko/20100101 "
                                     "Firefox/115.0"}));
  EXPECT_EQ(head.headers[7], (Header{"Cookie", "a=1; b=2"}));
}

TEST_F(RequestParserTest, ViewsPointIntoContiguousInput) {
  RequestHead head;
  const std::string& request = ValidRequests()[0];
  ASSERT_TRUE(ParseOnce(request, &head).complete());
  const char* begin = request.data();
  const char* end = begin + request.size();
  for (std::string_view v : {head.method_text, head.target, head.path, head.query, head.host}) {
    EXPECT_TRUE(v.data() >= begin && v.data() + v.size() <= end) << v;
  }
  for (const Header& h : head.headers) {
    EXPECT_TRUE(h.name.data() >= begin && h.value.data() + h.value.size() <= end) << h.name;
  }
}

TEST_F(RequestParserTest, RecognizesMethods) {
  const std::pair<std::string_view, Method> cases[] = {
      {"GET", Method::kGet},     {"HEAD", Method::kHead},      {"POST", Method::kPost},
      {"PUT", Method::kPut},     {"DELETE", Method::kDelete},  {"OPTIONS", Method::kOptions},
      {"PATCH", Method::kPatch}, {"TRACE", Method::kTrace},    {"PROPFIND", Method::kOther},
      {"get", Method::kOther},   {"M-SEARCH", Method::kOther},
  };
  for (const auto& [token, method] : cases) {
    RequestHead head;
    const std::string request = std::string(token) + " / HTTP/1.1\r\nHost: a\r\n\r\n";
    ASSERT_TRUE(ParseOnce(request, &head).complete()) << token;
    EXPECT_EQ(head.method, method) << token;
    EXPECT_EQ(head.method_text, token);
  }
}

TEST_F(RequestParserTest, Http10DefaultsToCloseAndNeedsNoHost) {
  RequestHead head;
  ASSERT_TRUE(ParseOnce("GET / HTTP/1.0\r\n\r\n", &head).complete());
  EXPECT_EQ(head.version_minor, 0);
  EXPECT_FALSE(head.keep_alive);
  EXPECT_EQ(head.host, "");
}

TEST_F(RequestParserTest, Http10KeepsAliveWhenAsked) {
  RequestHead head;
  ASSERT_TRUE(ParseOnce("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &head).complete());
  EXPECT_TRUE(head.keep_alive);
  ASSERT_TRUE(
      ParseOnce("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n", &head).complete());
  EXPECT_FALSE(head.keep_alive);
}

TEST_F(RequestParserTest, Http11ConnectionCloseDisablesKeepAlive) {
  RequestHead head;
  ASSERT_TRUE(
      ParseOnce("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", &head).complete());
  EXPECT_FALSE(head.keep_alive);
  // A comma list, case-insensitive, spread over several lines.
  ASSERT_TRUE(ParseOnce("GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n"
                        "Connection: ,  CLOSE ,\r\n\r\n",
                        &head)
                  .complete());
  EXPECT_FALSE(head.keep_alive);
  ASSERT_TRUE(
      ParseOnce("GET / HTTP/1.1\r\nHost: a\r\nConnection: closed\r\n\r\n", &head).complete());
  EXPECT_TRUE(head.keep_alive);
}

TEST_F(RequestParserTest, TrimsWhitespaceAroundValues) {
  RequestHead head;
  ASSERT_TRUE(ParseOnce("GET / HTTP/1.1\r\nHost:a\r\nX-A: \t x y \t\r\nX-Empty:\r\n"
                        "X-Spaces:   \r\nX-Obs: \xff\x80\r\n\r\n",
                        &head)
                  .complete());
  ASSERT_EQ(head.headers.size(), 5u);
  EXPECT_EQ(head.headers[0].value, "a");
  EXPECT_EQ(head.headers[1].value, "x y");
  EXPECT_EQ(head.headers[2].value, "");
  EXPECT_EQ(head.headers[3].value, "");
  EXPECT_EQ(head.headers[4].value, "\xff\x80");
}

TEST_F(RequestParserTest, FindIsCaseInsensitive) {
  RequestHead head;
  ASSERT_TRUE(
      ParseOnce("GET / HTTP/1.1\r\nHOST: a\r\nX-Thing: 1\r\nx-thing: 2\r\n\r\n", &head).complete());
  EXPECT_EQ(head.Find("x-thing"), "1");
  EXPECT_EQ(head.Find("host"), "a");
  EXPECT_EQ(head.Find("missing"), "");
}

TEST_F(RequestParserTest, ParsesContentLength) {
  RequestHead head;
  ASSERT_TRUE(
      ParseOnce("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0042\r\n\r\n", &head).complete());
  EXPECT_EQ(head.framing, BodyFraming::kContentLength);
  EXPECT_EQ(head.content_length, 42u);
  ASSERT_TRUE(
      ParseOnce("POST / HTTP/1.1\r\nHost: a\r\ncontent-length: 18446744073709551615\r\n\r\n", &head)
          .complete());
  EXPECT_EQ(head.content_length, UINT64_MAX);
  ASSERT_TRUE(
      ParseOnce("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", &head).complete());
  EXPECT_EQ(head.framing, BodyFraming::kContentLength);
  EXPECT_EQ(head.content_length, 0u);
}

TEST_F(RequestParserTest, ParsesChunkedTransferEncoding) {
  RequestHead head;
  ASSERT_TRUE(ParseOnce("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n", &head)
                  .complete());
  EXPECT_EQ(head.framing, BodyFraming::kChunked);
  // Empty list elements do not count.
  ASSERT_TRUE(
      ParseOnce("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: , chunked ,\r\n\r\n", &head)
          .complete());
  EXPECT_EQ(head.framing, BodyFraming::kChunked);
}

TEST_F(RequestParserTest, FlagsExpectContinue) {
  RequestHead head;
  ASSERT_TRUE(ParseOnce("PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\n"
                        "Content-Length: 5\r\n\r\n",
                        &head)
                  .complete());
  EXPECT_TRUE(head.expect_continue);
}

TEST_F(RequestParserTest, IgnoresExpectOnHttp10) {
  RequestHead head;
  ASSERT_TRUE(ParseOnce("PUT / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n", &head).complete());
  EXPECT_FALSE(head.expect_continue);
  ASSERT_TRUE(ParseOnce("PUT / HTTP/1.0\r\nExpect: something-else\r\n\r\n", &head).complete());
}

TEST_F(RequestParserTest, RejectsUnknownExpectationWith417) {
  ExpectRejected("PUT / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n", 417, "expectation");
  ExpectRejected("PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, x\r\n\r\n", 417,
                 "expectation");
}

TEST_F(RequestParserTest, AbsoluteFormTakesHostFromTarget) {
  RequestHead head;
  ASSERT_TRUE(
      ParseOnce("GET http://example.com:8080/a/b?c=d HTTP/1.1\r\nHost: other\r\n\r\n", &head)
          .complete());
  EXPECT_EQ(head.host, "example.com:8080");
  EXPECT_EQ(head.path, "/a/b");
  EXPECT_EQ(head.query, "c=d");
  ASSERT_TRUE(ParseOnce("GET https://example.com HTTP/1.1\r\nHost: x\r\n\r\n", &head).complete());
  EXPECT_EQ(head.path, "/");
  EXPECT_EQ(head.host, "example.com");
  ASSERT_TRUE(ParseOnce("GET http://[::1]?q HTTP/1.1\r\nHost: x\r\n\r\n", &head).complete());
  EXPECT_EQ(head.path, "/");
  EXPECT_EQ(head.query, "q");
  EXPECT_EQ(head.host, "[::1]");
}

TEST_F(RequestParserTest, RejectsMalformedAbsoluteForm) {
  ExpectRejected("GET http:/x HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request-target");
  ExpectRejected("GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", 400, "authority");
  ExpectRejected("GET http://user@host/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, "authority");
  ExpectRejected("GET 1http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request-target");
  ExpectRejected("GET index.html HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request-target");
}

TEST_F(RequestParserTest, AcceptsAsteriskFormForOptionsOnly) {
  RequestHead head;
  ASSERT_TRUE(ParseOnce("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", &head).complete());
  EXPECT_EQ(head.path, "*");
  ExpectRejected("GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400, "asterisk");
}

TEST_F(RequestParserTest, AcceptsAuthorityFormForConnectOnly) {
  RequestHead head;
  ASSERT_TRUE(ParseOnce("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", &head)
                  .complete());
  EXPECT_EQ(head.method, Method::kConnect);
  EXPECT_EQ(head.host, "example.com:443");
  EXPECT_EQ(head.path, "");
  ExpectRejected("CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n", 400, "CONNECT");
  ExpectRejected("CONNECT example.com HTTP/1.1\r\nHost: a\r\n\r\n", 400, "CONNECT");
  ExpectRejected("CONNECT example.com: HTTP/1.1\r\nHost: a\r\n\r\n", 400, "CONNECT");
  ExpectRejected("GET example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request-target");
}

TEST_F(RequestParserTest, SkipsLeadingEmptyLines) {
  RequestHead head;
  const std::string request = "\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n";
  const ParseOutcome r = ParseOnce(request, &head);
  ASSERT_TRUE(r.complete()) << Describe(r);
  EXPECT_EQ(r.consumed, request.size());
  EXPECT_EQ(head.method_text, "GET");
}

TEST_F(RequestParserTest, RejectsTooManyLeadingEmptyLines) {
  ExpectRejected(std::string(2 * 9, ' ').replace(0, 18, "\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n\r\n") +
                     "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
                 400, "empty lines", ParseLimits{.max_leading_empty_lines = 8});
  RequestHead head;
  RequestParser parser(ParseLimits{.max_leading_empty_lines = 2});
  EXPECT_TRUE(parser.Parse("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", &head).complete());
  const ParseOutcome r = parser.Parse("\r\n\r\n\r\n", &head);
  EXPECT_EQ(r.status_code, 400);
  EXPECT_EQ(parser.counters().leading_empty_lines_too_many, 1u);
}

TEST_F(RequestParserTest, RejectsMalformedRequestLines) {
  ExpectRejected("G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "method");
  ExpectRejected(" GET / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "method");
  ExpectRejected("GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request-target");
  ExpectRejected("GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400, "request line");
  ExpectRejected("GET /\r\nHost: a\r\n\r\n", 400, "request line");
  ExpectRejected("GET HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request line");
  ExpectRejected("GET\r\n\r\n", 400, "method");
  ExpectRejected("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request-target");
  ExpectRejected("GET /\tb HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request-target");
}

TEST_F(RequestParserTest, RejectsMalformedVersions) {
  ExpectRejected("GET / http/1.1\r\nHost: a\r\n\r\n", 400, "version");
  ExpectRejected("GET / HTTP/1.x\r\nHost: a\r\n\r\n", 400, "version");
  ExpectRejected("GET / HTTP/11.\r\nHost: a\r\n\r\n", 400, "version");
  ExpectRejected("GET / HTTP/1.10\r\nHost: a\r\n\r\n", 400, "request line");
  ExpectRejected("GET / HTTPS/1.1\r\nHost: a\r\n\r\n", 400, "request line");
}

TEST_F(RequestParserTest, RejectsUnsupportedVersionsWith505) {
  ExpectRejected("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505, "version");
  ExpectRejected("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, "version");
  ExpectRejected("GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505, "version");
  ExpectRejected("GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505, "version");
}

TEST_F(RequestParserTest, RejectsInvalidTargetBytes) {
  ExpectRejected("GET /a\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request-target");
  ExpectRejected("GET /caf\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request-target");
  ExpectRejected("GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request-target");
  ExpectRejected("GET /a\x7f HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request-target");
}

TEST_F(RequestParserTest, RejectsMalformedFieldNames) {
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\nX-A : b\r\n"), 400,
                 "whitespace between field name and colon");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\nX-A\t: b\r\n"), 400,
                 "whitespace between field name and colon");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\n: b\r\n"), 400, "empty field name");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\nX(A): b\r\n"), 400, "field name");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\nNoColon\r\n"), 400, "colon");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\nX\x80: b\r\n"), 400, "field name");
}

TEST_F(RequestParserTest, RejectsControlCharactersInValues) {
  ExpectRejected(WithHeaders("GET / HTTP/1.1", std::string("Host: a\r\nX: a\0b\r\n", 17)), 400,
                 "invalid character in field value");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\nX: a\rb\r\n"), 400, "bare CR");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\nX: a\x1b[31m\r\n"), 400,
                 "invalid character in field value");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\nX: a\x7f\r\n"), 400,
                 "invalid character in field value");
  RequestHead head;
  EXPECT_TRUE(ParseOnce(WithHeaders("GET / HTTP/1.1", "Host: a\r\nX: a\tb\r\n"), &head).complete());
}

TEST_F(RequestParserTest, RejectsObsFold) {
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\nX: a\r\n b\r\n"), 400, "obs-fold");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\nX: a\r\n\tb\r\n"), 400, "obs-fold");
  // Whitespace between the request line and the first field (RFC 9112 §2.2).
  ExpectRejected(WithHeaders("GET / HTTP/1.1", " Host: a\r\n"), 400, "obs-fold");
}

TEST_F(RequestParserTest, RejectsBareLfLineEndings) {
  ExpectRejected("GET / HTTP/1.1\nHost: a\r\n\r\n", 400, "bare LF");
  ExpectRejected("GET / HTTP/1.1\r\nHost: a\n\r\n", 400, "bare LF");
  ExpectRejected("GET / HTTP/1.1\r\nHost: a\r\n\n", 400, "bare LF");
  ExpectRejected("\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400, "bare LF");
  // Reported as soon as the LF arrives, before the head is complete.
  RequestHead head;
  EXPECT_EQ(ParseOnce("GET / HTTP/1.1\r\nX: a\n", &head).status_code, 400);
}

TEST_F(RequestParserTest, RejectsBareCrInRequestLine) {
  ExpectRejected("GET / HTTP/1.1\rX\r\nHost: a\r\n\r\n", 400, "request line");
  ExpectRejected("GET /\r HTTP/1.1\r\nHost: a\r\n\r\n", 400, "request-target");
}

TEST_F(RequestParserTest, RejectsMissingHostOnHttp11) {
  ExpectRejected("GET / HTTP/1.1\r\n\r\n", 400, "missing Host");
  ExpectRejected("GET http://a/ HTTP/1.1\r\n\r\n", 400, "missing Host");
}

TEST_F(RequestParserTest, RejectsMultipleHost) {
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\nHost: a\r\n"), 400, "multiple Host");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\nhost: b\r\n"), 400, "multiple Host");
  ExpectRejected(WithHeaders("GET / HTTP/1.0", "Host: a\r\nHost: b\r\n"), 400, "multiple Host");
}

TEST_F(RequestParserTest, RejectsInvalidHost) {
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a b\r\n"), 400, "invalid Host");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a/b\r\n"), 400, "invalid Host");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: user@a\r\n"), 400, "invalid Host");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a:8x\r\n"), 400, "invalid Host");
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: [::1\r\n"), 400, "invalid Host");
  RequestHead head;
  // An empty Host is valid (RFC 9110 §7.2).
  EXPECT_TRUE(ParseOnce(WithHeaders("GET / HTTP/1.1", "Host:\r\n"), &head).complete());
}

TEST_F(RequestParserTest, ValidatesEachNewHostOnOneParser) {
  // The parser remembers the last valid Host: a different one is still validated, and the
  // remembered one is still accepted after a refusal.
  RequestParser parser;
  RequestHead head;
  // The head's views point into the request, which lives here until the next parse.
  std::string request;
  const auto parse = [&](std::string_view host) {
    request = WithHeaders("GET / HTTP/1.1", "Host: " + std::string(host) + "\r\n");
    return parser.Parse(request, &head);
  };
  EXPECT_TRUE(parse("127.0.0.1:8080").complete());
  EXPECT_TRUE(parse("127.0.0.1:8080").complete());
  EXPECT_EQ(head.host, "127.0.0.1:8080");
  EXPECT_EQ(parse("127.0.0.1:80x").status_code, 400);
  EXPECT_TRUE(parse("127.0.0.1:8080 ").complete());  // trailing OWS is not part of the value
  EXPECT_EQ(parse("127.0.0.1/8080").status_code, 400);
  EXPECT_TRUE(parse("127.0.0.1:8080").complete());
  EXPECT_TRUE(parse("").complete());
  EXPECT_EQ(parse("a b").status_code, 400);
}

TEST_F(RequestParserTest, RejectsContentLengthWithTransferEncoding) {
  ExpectRejected(WithHeaders("POST / HTTP/1.1",
                             "Host: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
                 400, "Transfer-Encoding with Content-Length");
  ExpectRejected(WithHeaders("POST / HTTP/1.1",
                             "Host: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n"),
                 400, "Transfer-Encoding with Content-Length");
}

TEST_F(RequestParserTest, RejectsTransferEncodingOnHttp10) {
  ExpectRejected(WithHeaders("POST / HTTP/1.0", "Transfer-Encoding: chunked\r\n"), 400, "HTTP/1.0");
}

TEST_F(RequestParserTest, RejectsChunkedThatIsNotFinal) {
  ExpectRejected(WithHeaders("POST / HTTP/1.1", "Host: a\r\nTransfer-Encoding: chunked, gzip\r\n"),
                 400, "final");
  ExpectRejected(
      WithHeaders("POST / HTTP/1.1",
                  "Host: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n"),
      400, "final");
  ExpectRejected(WithHeaders("POST / HTTP/1.1", "Host: a\r\nTransfer-Encoding: gzip\r\n"), 400,
                 "final");
  ExpectRejected(
      WithHeaders("POST / HTTP/1.1", "Host: a\r\nTransfer-Encoding: chunked, chunked\r\n"), 400,
      "more than once");
  ExpectRejected(WithHeaders("POST / HTTP/1.1", "Host: a\r\nTransfer-Encoding: chunkedx\r\n"), 400,
                 "final");
}

TEST_F(RequestParserTest, RejectsUnknownCodingBeforeChunkedWith501) {
  ExpectRejected(WithHeaders("POST / HTTP/1.1", "Host: a\r\nTransfer-Encoding: gzip, chunked\r\n"),
                 501, "transfer coding");
  ExpectRejected(
      WithHeaders("POST / HTTP/1.1",
                  "Host: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"),
      501, "transfer coding");
}

TEST_F(RequestParserTest, RejectsEmptyOrInvalidTransferEncoding) {
  ExpectRejected(WithHeaders("POST / HTTP/1.1", "Host: a\r\nTransfer-Encoding:\r\n"), 400,
                 "empty Transfer-Encoding");
  ExpectRejected(WithHeaders("POST / HTTP/1.1", "Host: a\r\nTransfer-Encoding: , ,\r\n"), 400,
                 "empty Transfer-Encoding");
  ExpectRejected(WithHeaders("POST / HTTP/1.1", "Host: a\r\nTransfer-Encoding: g@zip, chunked\r\n"),
                 400, "invalid transfer coding");
}

TEST_F(RequestParserTest, RejectsRepeatedContentLengthEvenIfEqual) {
  ExpectRejected(
      WithHeaders("POST / HTTP/1.1", "Host: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n"), 400,
      "repeated Content-Length");
  ExpectRejected(
      WithHeaders("POST / HTTP/1.1", "Host: a\r\nContent-Length: 5\r\ncontent-length: 5\r\n"), 400,
      "repeated Content-Length");
}

TEST_F(RequestParserTest, RejectsContentLengthList) {
  ExpectRejected(WithHeaders("POST / HTTP/1.1", "Host: a\r\nContent-Length: 5, 6\r\n"), 400,
                 "invalid Content-Length");
  ExpectRejected(WithHeaders("POST / HTTP/1.1", "Host: a\r\nContent-Length: 5, 5\r\n"), 400,
                 "invalid Content-Length");
}

TEST_F(RequestParserTest, RejectsNonDigitOrOverflowingContentLength) {
  for (std::string_view value : {"", "+5", "-1", "0x10", "5 5", "1e3", "5.0",
                                 "18446744073709551616", "99999999999999999999999"}) {
    ExpectRejected(
        WithHeaders("POST / HTTP/1.1", "Host: a\r\nContent-Length: " + std::string(value) + "\r\n"),
        400, "invalid Content-Length");
  }
}

// The limits.

TEST_F(RequestParserTest, AcceptsRequestLineAtLimit) {
  const ParseLimits limits{.max_request_line = 64};
  const std::string line = "GET /" + std::string(64 - 14, 'a') + " HTTP/1.1";
  ASSERT_EQ(line.size(), 64u);
  RequestHead head;
  EXPECT_TRUE(ParseOnce(line + "\r\nHost: a\r\n\r\n", &head, limits).complete());
}

TEST_F(RequestParserTest, RejectsRequestLineOverLimitWith414) {
  const ParseLimits limits{.max_request_line = 64};
  const std::string line = "GET /" + std::string(65 - 14, 'a') + " HTTP/1.1";
  ASSERT_EQ(line.size(), 65u);
  ExpectRejected(line + "\r\nHost: a\r\n\r\n", 414, "request line too long", limits);
}

TEST_F(RequestParserTest, RejectsRequestLineOverLimitWhileIncomplete) {
  const ParseLimits limits{.max_request_line = 64};
  RequestHead head;
  // Exactly at the limit, and at the limit plus its CR: still possibly fine.
  EXPECT_TRUE(ParseOnce("GET /" + std::string(59, 'a'), &head, limits).incomplete());
  EXPECT_TRUE(ParseOnce("GET /" + std::string(59, 'a') + "\r", &head, limits).incomplete());
  // One byte over: refused without waiting for the end of the line.
  const ParseOutcome r = ParseOnce("GET /" + std::string(60, 'a'), &head, limits);
  EXPECT_EQ(r.status_code, 414) << Describe(r);
  EXPECT_EQ(ParseOnce(std::string(1000, 'a'), &head, limits).status_code, 414);
}

TEST_F(RequestParserTest, ReportsTooLongRequestLineBeforeALaterBareLf) {
  // 65 bytes then a bare LF: too long (414) was already certain before the LF arrived, and the
  // answer must not depend on whether the LF came in the same read.
  const ParseLimits limits{.max_request_line = 64};
  const std::string request = "GET /" + std::string(60, 'a') + "\nHost: a\r\n\r\n";
  RequestHead head;
  EXPECT_EQ(ParseOnce(request, &head, limits).status_code, 414);
  EXPECT_EQ(ParseOnce(request.substr(0, 65), &head, limits).status_code, 414);
  // 64 bytes then a bare LF: the line fits; the LF is the error.
  EXPECT_EQ(
      ParseOnce("GET /" + std::string(59, 'a') + "\nHost: a\r\n\r\n", &head, limits).status_code,
      400);
}

TEST_F(RequestParserTest, DefaultRequestLineLimitIs8KiB) {
  RequestHead head;
  EXPECT_TRUE(ParseOnce("GET /" + std::string(8192 - 5, 'a'), &head).incomplete());
  EXPECT_EQ(ParseOnce("GET /" + std::string(8192 - 4, 'a'), &head).status_code, 414);
}

TEST_F(RequestParserTest, AcceptsHeaderSectionAtLimit) {
  // "Host: a\r\n" (9) + "X: " + value + "\r\n" + "\r\n" == 100.
  const ParseLimits limits{.max_header_bytes = 100};
  const std::string fields = "Host: a\r\nX: " + std::string(100 - 9 - 5 - 2, 'v') + "\r\n";
  RequestHead head;
  const ParseOutcome r = ParseOnce(WithHeaders("GET / HTTP/1.1", fields), &head, limits);
  EXPECT_TRUE(r.complete()) << Describe(r);
}

TEST_F(RequestParserTest, RejectsHeaderSectionOverLimitWith431) {
  const ParseLimits limits{.max_header_bytes = 100};
  const std::string fields = "Host: a\r\nX: " + std::string(100 - 9 - 5 - 1, 'v') + "\r\n";
  ExpectRejected(WithHeaders("GET / HTTP/1.1", fields), 431, "header section too large", limits);
}

TEST_F(RequestParserTest, CutsEndlessHeadersAtLimitWhileIncomplete) {
  // A slowloris that keeps sending field lines is refused once the section passes the limit,
  // with the head still incomplete.
  const ParseLimits limits{.max_header_bytes = 1024};
  RequestParser parser(limits);
  RequestHead head;
  std::string stream = "GET / HTTP/1.1\r\nHost: a\r\n";
  ParseOutcome r = parser.Parse(stream, &head);
  int lines = 0;
  while (r.incomplete() && lines < 1000) {
    stream += "X-" + std::to_string(lines++) + ": slow\r\n";
    r = parser.Parse(stream, &head);
  }
  EXPECT_EQ(r.status_code, 431) << Describe(r);
  EXPECT_LE(stream.size(), 16u + 1024u + 20u);
  EXPECT_EQ(parser.counters().header_bytes_too_large, 1u);
  // And one long field value that never ends.
  EXPECT_EQ(ParseOnce("GET / HTTP/1.1\r\nX: " + std::string(1100, 'v'), &head, limits).status_code,
            431);
}

TEST_F(RequestParserTest, AcceptsHeaderCountAtLimit) {
  std::string fields = "Host: a\r\n";
  for (int i = 1; i < 100; ++i) fields += "X-" + std::to_string(i) + ": v\r\n";
  RequestHead head;
  ASSERT_TRUE(ParseOnce(WithHeaders("GET / HTTP/1.1", fields), &head).complete());
  EXPECT_EQ(head.headers.size(), 100u);
}

TEST_F(RequestParserTest, RejectsHeaderCountOverLimitWith431) {
  std::string fields = "Host: a\r\n";
  for (int i = 1; i <= 100; ++i) fields += "X-" + std::to_string(i) + ": v\r\n";
  ExpectRejected(WithHeaders("GET / HTTP/1.1", fields), 431, "too many header fields");
  // Also before the head is complete.
  RequestParser parser;
  RequestHead head;
  EXPECT_EQ(parser.Parse("GET / HTTP/1.1\r\n" + fields, &head).status_code, 431);
  EXPECT_EQ(parser.counters().header_count_too_large, 1u);
}

TEST_F(RequestParserTest, HonorsSmallHeaderCountLimit) {
  ExpectRejected(WithHeaders("GET / HTTP/1.1", "Host: a\r\nA: 1\r\nB: 2\r\n"), 431, "too many",
                 ParseLimits{.max_header_count = 2});
}

// Segments, prefixes, pipelining.

TEST_F(RequestParserTest, ParsesEveryRequestSplitAtEveryByteAcrossTwoSegments) {
  for (const std::string& request : ValidRequests()) {
    RequestHead expected;
    const ParseOutcome want = ParseOnce(request, &expected);
    ASSERT_TRUE(want.complete()) << Describe(want) << "\n" << request;
    // Where the head starts after any leading empty lines.
    const size_t request_line = request.find_first_not_of("\r\n");
    for (size_t k = 0; k <= request.size(); ++k) {
      SegmentedInput input(
          &pool(), {std::string_view(request).substr(0, k), std::string_view(request).substr(k)});
      const BufferSequence& buffer = input.Read();
      ASSERT_EQ(buffer.ToString(), request);
      RequestParser parser;
      RequestHead head;
      const ParseOutcome r = parser.Parse(buffer, &head);
      ASSERT_EQ(Describe(r), Describe(want)) << "split at " << k << "\n" << request;
      ASSERT_EQ(Describe(head), Describe(expected)) << "split at " << k;
      const bool split_inside_head = k > request_line && k < want.consumed;
      EXPECT_EQ(parser.counters().linearized, split_inside_head ? 1u : 0u) << "split at " << k;
    }
  }
}

// A head that lies in one chunk is parsed in place (the request line split by its syntax, the
// field lines finding their own ends); one that spans chunks goes through the head scanner. The
// two must agree on every outcome, errors and limits included: each input here is parsed whole,
// and split after its first byte (so the head spans two chunks), by fresh parsers.
TEST_F(RequestParserTest, InPlaceAndScannedParsesAgreeOnEveryOutcome) {
  const ParseLimits small{.max_request_line = 32, .max_header_bytes = 64, .max_header_count = 3};
  const std::string at_line_limit = "GET /" + std::string(32 - 14, 'a') + " HTTP/1.1\r\n";
  const std::string over_line_limit = "GET /" + std::string(33 - 14, 'a') + " HTTP/1.1\r\n";
  // "Host: a\r\n" (9) + "X: " + value + "\r\n" + "\r\n" (7) == 64 bytes.
  const std::string at_bytes_limit = "Host: a\r\nX: " + std::string(64 - 16, 'v') + "\r\n\r\n";
  const std::string over_bytes_limit = "Host: a\r\nX: " + std::string(65 - 16, 'v') + "\r\n\r\n";
  const std::vector<std::string> inputs = {
      "GET /plaintext HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /next HTTP/1.1\r\n",  // pipelined
      "GET /?q HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET /? HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET /a?b?c#d HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET /a?b HTTP/1.0\r\n\r\n",
      "HEAD /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
      "get / HTTP/1.1\r\nHost: a\r\n\r\n",
      "GETX / HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
      "GET /  HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET / HTTP/1.2\r\nHost: a\r\n\r\n",
      "GET / http/1.1\r\nHost: a\r\n\r\n",
      "GET / HTTP/1.1\nHost: a\r\n\r\n",
      "GET / HTTP/1.1\rHost: a\r\n\r\n",
      "GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nX: a\nb\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\n\nX: 1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nX : 1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
      "GET / HTTP/1.1\r\nX: 1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nExpect: nothing\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n",
      "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET * HTTP/1.1\r\nHost: a\r\n\r\n",
      "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
      "CONNECT /a HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET http://b.example HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET http://[x HTTP/1.1\r\nHost: a\r\n\r\n",
      "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
      at_line_limit + "Host: a\r\n\r\n",
      over_line_limit + "Host: a\r\n\r\n",
      "GET / HTTP/1.1\r\n" + at_bytes_limit,
      "GET / HTTP/1.1\r\n" + over_bytes_limit,
      "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\n",  // incomplete
      "GET / HTTP/1.1\r\nHost: a\r",
  };
  for (const std::string& input : inputs) {
    RequestParser whole(small);
    RequestHead whole_head;
    const ParseOutcome want = whole.Parse(input, &whole_head);
    SegmentedInput split(&pool(),
                         {std::string_view(input).substr(0, 1), std::string_view(input).substr(1)});
    RequestParser scanned(small);
    RequestHead scanned_head;
    const ParseOutcome got = scanned.Parse(split.Read(), &scanned_head);
    ASSERT_EQ(Describe(got), Describe(want)) << input;
    if (want.complete()) {
      EXPECT_EQ(Describe(scanned_head), Describe(whole_head)) << input;
      EXPECT_EQ(scanned_head.bytes, whole_head.bytes) << input;
      // Split inside the head (after leading empty lines, the head starts in the second chunk).
      EXPECT_EQ(scanned.counters().linearized, input[0] == '\r' ? 0u : 1u) << input;
    }
    EXPECT_EQ(whole.counters().linearized, 0u) << input;
    EXPECT_EQ(whole.counters().requests, scanned.counters().requests) << input;
    EXPECT_EQ(whole.counters().errors, scanned.counters().errors) << input;
    EXPECT_EQ(whole.counters().request_line_too_long, scanned.counters().request_line_too_long);
    EXPECT_EQ(whole.counters().header_bytes_too_large, scanned.counters().header_bytes_too_large);
    EXPECT_EQ(whole.counters().header_count_too_large, scanned.counters().header_count_too_large);
  }
}

TEST_F(RequestParserTest, ParsesAFieldLineSplitAcrossChunksAsInOneChunk) {
  const std::string request =
      "GET /a?b=c HTTP/1.1\r\nHost: example.com\r\nX-Field:  spaced value\t \r\n\r\n";
  RequestHead whole;
  ASSERT_TRUE(ParseOnce(request, &whole).complete());
  EXPECT_EQ(whole.Find("x-field"), "spaced value");
  // Splits inside "X-Field:  spaced value\t \r\n": in its name, its value, its CRLF.
  const size_t line = request.find("X-Field");
  for (size_t k = line; k <= line + 25; ++k) {
    SegmentedInput input(
        &pool(), {std::string_view(request).substr(0, k), std::string_view(request).substr(k)});
    RequestParser parser;
    RequestHead head;
    const ParseOutcome r = parser.Parse(input.Read(), &head);
    ASSERT_TRUE(r.complete()) << Describe(r) << " split at " << k;
    EXPECT_EQ(Describe(head), Describe(whole)) << "split at " << k;
    EXPECT_EQ(parser.counters().linearized, 1u);
  }
}

TEST_F(RequestParserTest, ParsesPipelinedHeadsInPlaceOneAfterAnother) {
  // Three heads in one chunk, the last cut short: the first two in place, the third incomplete
  // until the rest arrives in a second chunk, then scanned from where the scan stopped.
  const std::string first = "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n";
  const std::string second = "GET /2?x HTTP/1.1\r\nHost: a\r\n\r\n";
  const std::string third = "GET /3 HTTP/1.1\r\nHost: a\r\n\r\n";
  SegmentedInput input(&pool());
  input.Append(first + second + third.substr(0, 20));
  RequestParser parser;
  RequestHead head;
  const BufferSequence* buffer = &input.Read();
  ParseOutcome r = parser.Parse(*buffer, 0, &head);
  ASSERT_TRUE(r.complete()) << Describe(r);
  EXPECT_EQ(head.path, "/1");
  r = parser.Parse(*buffer, first.size(), &head);
  ASSERT_TRUE(r.complete()) << Describe(r);
  EXPECT_EQ(head.path, "/2");
  EXPECT_EQ(head.query, "x");
  const size_t third_at = first.size() + second.size();
  EXPECT_TRUE(parser.Parse(*buffer, third_at, &head).incomplete());
  input.Break();
  input.Append(third.substr(20));
  buffer = &input.Read();
  r = parser.Parse(*buffer, third_at, &head);
  ASSERT_TRUE(r.complete()) << Describe(r);
  EXPECT_EQ(r.consumed, third.size());
  EXPECT_EQ(head.path, "/3");
  EXPECT_EQ(parser.counters().requests, 3u);
  EXPECT_EQ(parser.counters().linearized, 1u);
}

TEST_F(RequestParserTest, ParsesAHeadThatDiffersInAnyByteAfresh) {
  const std::string request = "GET /a HTTP/1.1\r\nHost: example.com\r\nX: 1\r\n\r\n";
  // Every byte of the head changed to a byte of each kind, parsed by a parser that has just
  // parsed the unchanged head: the outcome is that of a fresh parser (errors included).
  for (size_t i = 0; i < request.size(); ++i) {
    for (char c : {'b', ' ', '\r', '\n', '\0', ':', '/', '?'}) {
      if (request[i] == c) continue;
      std::string changed = request;
      changed[i] = c;
      RequestParser parser;
      RequestHead head;
      ASSERT_TRUE(parser.Parse(request, &head).complete());
      const ParseOutcome r = parser.Parse(changed, &head);
      RequestHead fresh;
      const ParseOutcome want = ParseOnce(changed, &fresh);
      ASSERT_EQ(Describe(r), Describe(want)) << "byte " << i << " as " << int{c};
      if (want.complete()) {
        ASSERT_EQ(Describe(head), Describe(fresh)) << "byte " << i << " as " << int{c};
      }
    }
  }
}

TEST_F(RequestParserTest, ParsesAPipelinedRepeatAndItsPrefixesStayIncomplete) {
  const std::string request = "GET /p HTTP/1.1\r\nHost: a\r\n\r\n";
  RequestParser parser;
  RequestHead head;
  const std::string twice = request + request;
  ParseOutcome r = parser.Parse(twice, &head);
  ASSERT_TRUE(r.complete());
  SegmentedInput input(&pool(), {twice});
  const BufferSequence& buffer = input.Read();
  r = parser.Parse(buffer, request.size(), &head);
  ASSERT_TRUE(r.complete()) << Describe(r);
  EXPECT_EQ(r.consumed, request.size());
  EXPECT_EQ(head.path, "/p");
  // A prefix of the head just parsed is incomplete, as for a fresh parser.
  for (size_t k = 1; k < request.size(); ++k) {
    RequestParser p;
    ASSERT_TRUE(p.Parse(request, &head).complete());
    EXPECT_TRUE(p.Parse(std::string_view(request).substr(0, k), &head).incomplete()) << k;
  }
}

TEST_F(RequestParserTest, ParsesEveryRequestSplitIntoThreeSegments) {
  for (const std::string& request : ValidRequests()) {
    RequestHead expected;
    const ParseOutcome want = ParseOnce(request, &expected);
    ASSERT_TRUE(want.complete());
    const std::string_view bytes(request);
    const size_t n = std::min<size_t>(request.size(), want.consumed + 2);
    for (size_t i = 0; i <= n; ++i) {
      for (size_t j = i; j <= n; j += (j - i < 8 ? 1 : 7)) {
        SegmentedInput input(&pool(),
                             {bytes.substr(0, i), bytes.substr(i, j - i), bytes.substr(j)});
        RequestParser parser;
        RequestHead head;
        const ParseOutcome r = parser.Parse(input.Read(), &head);
        ASSERT_EQ(Describe(r), Describe(want)) << "split at " << i << ", " << j;
        ASSERT_EQ(Describe(head), Describe(expected)) << "split at " << i << ", " << j;
      }
    }
  }
}

TEST_F(RequestParserTest, EveryProperPrefixIsIncomplete) {
  for (const std::string& request : ValidRequests()) {
    RequestHead head;
    const ParseOutcome want = ParseOnce(request, &head);
    ASSERT_TRUE(want.complete());
    for (size_t k = 0; k < want.consumed; ++k) {
      const ParseOutcome r = ParseOnce(std::string_view(request).substr(0, k), &head);
      ASSERT_TRUE(r.incomplete()) << Describe(r) << " at " << k << "\n" << request;
    }
  }
}

TEST_F(RequestParserTest, ResumesByteByByteThroughPipe) {
  // The connection's loop: read, parse, AdvanceTo(0, all), read more. One parser throughout,
  // so the scan resumes where it stopped.
  for (const std::string& request : ValidRequests()) {
    RequestHead expected;
    const ParseOutcome want = ParseOnce(request, &expected);
    SegmentedInput input(&pool());
    RequestParser parser;
    RequestHead head;
    ParseOutcome r;
    size_t fed = 0;
    while (fed < request.size()) {
      if (fed % 97 == 50) input.Break();  // now and then a new segment
      input.Append(std::string_view(request).substr(fed++, 1));
      r = parser.Parse(input.Read(), &head);
      if (!r.incomplete()) break;
    }
    ASSERT_EQ(fed, want.consumed) << request;
    ASSERT_EQ(Describe(r), Describe(want));
    EXPECT_EQ(Describe(head), Describe(expected));
  }
}

TEST_F(RequestParserTest, ResumesWhenEarlierRequestsAreConsumed) {
  SegmentedInput input(&pool());
  input.Append("GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHo");
  RequestParser parser;
  RequestHead head;
  const BufferSequence& buffer = input.Read();
  ParseOutcome r = parser.Parse(buffer, &head);
  ASSERT_TRUE(r.complete());
  EXPECT_EQ(head.path, "/1");
  const size_t first = r.consumed;
  r = parser.Parse(buffer, first, &head);
  ASSERT_TRUE(r.incomplete());
  // The first request is consumed; the second now starts at offset 0 of the next read.
  input.Consume(first);
  input.Append("st: b\r\n\r\n");
  r = parser.Parse(input.Read(), 0, &head);
  ASSERT_TRUE(r.complete()) << Describe(r);
  EXPECT_EQ(head.path, "/2");
  EXPECT_EQ(head.host, "b");
}

TEST_F(RequestParserTest, ResetForgetsAnIncompleteHead) {
  RequestParser parser;
  RequestHead head;
  const std::string a = "GET /aaaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\nHost: x\r\n";
  ASSERT_TRUE(parser.Parse(a, &head).incomplete());
  parser.Reset();
  const std::string b = "GET /b HTTP/1.1\r\nHost: y\r\n\r\n";
  ASSERT_TRUE(parser.Parse(b, &head).complete());
  EXPECT_EQ(head.path, "/b");
}

TEST_F(RequestParserTest, RestartsOnInputShorterThanScanned) {
  // Input that cannot continue the previous call (a broken contract) is parsed from scratch
  // instead of trusting stale state.
  RequestParser parser;
  RequestHead head;
  ASSERT_TRUE(
      parser.Parse("GET /aaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\nHost: x\r\n", &head).incomplete());
  const ParseOutcome r = parser.Parse("GET /b HTTP/1.1\r\nHost: y\r\n\r\n", &head);
  ASSERT_TRUE(r.complete()) << Describe(r);
  EXPECT_EQ(head.path, "/b");
}

TEST_F(RequestParserTest, ParsesPipelinedRequestsOneAfterAnother) {
  std::string stream;
  for (const std::string& request : ValidRequests()) stream += request;
  // Split in the middle of the third request's head too.
  const size_t split = ValidRequests()[0].size() + ValidRequests()[1].size() + 10;
  SegmentedInput input(
      &pool(), {std::string_view(stream).substr(0, split), std::string_view(stream).substr(split)});
  const BufferSequence& buffer = input.Read();
  RequestParser parser;
  size_t offset = 0;
  for (const std::string& request : ValidRequests()) {
    RequestHead head;
    RequestHead expected;
    const ParseOutcome want = ParseOnce(request, &expected);
    const ParseOutcome r = parser.Parse(buffer, offset, &head);
    ASSERT_EQ(Describe(r), Describe(want)) << "at offset " << offset;
    EXPECT_EQ(Describe(head), Describe(expected));
    // Skip the body: the test requests' bodies are whatever follows the head.
    offset += request.size();
  }
  RequestHead head;
  EXPECT_TRUE(parser.Parse(buffer, offset, &head).incomplete());
  EXPECT_EQ(parser.counters().requests, ValidRequests().size());
}

TEST_F(RequestParserTest, LimitsFireOnIncompleteInputAcrossSegments) {
  const ParseLimits limits{.max_request_line = 64, .max_header_bytes = 128};
  {
    SegmentedInput input(&pool(), {"GET /" + std::string(30, 'a'), std::string(30, 'a')});
    RequestParser parser(limits);
    RequestHead head;
    EXPECT_EQ(parser.Parse(input.Read(), &head).status_code, 414);
  }
  {
    SegmentedInput input(&pool(),
                         {"GET / HTTP/1.1\r\nX: " + std::string(70, 'v'), std::string(70, 'v')});
    RequestParser parser(limits);
    RequestHead head;
    EXPECT_EQ(parser.Parse(input.Read(), &head).status_code, 431);
  }
}

TEST_F(RequestParserTest, HeaderVectorKeepsItsCapacity) {
  RequestParser parser;
  RequestHead head;
  ASSERT_TRUE(parser.Parse(ValidRequests()[0], &head).complete());
  const size_t capacity = head.headers.capacity();
  const Header* storage = head.headers.data();
  ASSERT_TRUE(parser.Parse(ValidRequests()[0], &head).complete());
  EXPECT_EQ(head.headers.capacity(), capacity);
  EXPECT_EQ(head.headers.data(), storage);
}

TEST_F(RequestParserTest, CountsRequestsAndErrors) {
  RequestParser parser;
  RequestHead head;
  ASSERT_TRUE(parser.Parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n", &head).complete());
  ASSERT_TRUE(parser.Parse("GET / HTTP/1.1\r\n\r\n", &head).error());
  EXPECT_EQ(parser.counters().requests, 1u);
  EXPECT_EQ(parser.counters().errors, 1u);
}

TEST_F(RequestParserTest, RejectsOffsetPastEnd) {
  RequestParser parser;
  RequestHead head;
  SegmentedInput input(&pool(), {"GET"});
  EXPECT_EQ(parser.Parse(input.Read(), 4, &head).status_code, 500);
}

}  // namespace
}  // namespace sluice::http1
