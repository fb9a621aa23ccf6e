#include "http2/request_headers.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace sluice::http2 {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

const Fields kGet = {{":method", "GET"}, {":scheme", "https"}, {":path", "/a?b"},
                     {":authority", "example.com"}, {"accept", "*/*"}};

// Runs a whole block; returns the first problem (from Check, then Finish), or "" if none.
std::string Verdict(const Fields& fields, bool trailers = false) {
  RequestHeaderCheck check;
  check.Reset(trailers);
  for (const auto& [name, value] : fields) {
    RequestPseudoHeader pseudo;
    if (const char* problem = check.Check(name, value, &pseudo)) return problem;
  }
  if (trailers) return "";
  const char* problem = check.Finish();
  return problem == nullptr ? "" : problem;
}

Fields With(Fields fields, std::string name, std::string value) {
  fields.emplace_back(std::move(name), std::move(value));
  return fields;
}

TEST(RequestHeaderCheck, AcceptsAWellFormedRequestAndNamesItsPseudoHeaders) {
  RequestHeaderCheck check;
  check.Reset(false);
  std::vector<RequestPseudoHeader> seen;
  for (const auto& [name, value] : kGet) {
    RequestPseudoHeader pseudo;
    ASSERT_EQ(check.Check(name, value, &pseudo), nullptr) << name;
    seen.push_back(pseudo);
  }
  EXPECT_EQ(check.Finish(), nullptr);
  EXPECT_TRUE(check.has_authority());
  EXPECT_EQ(seen, (std::vector<RequestPseudoHeader>{
                      RequestPseudoHeader::kMethod, RequestPseudoHeader::kScheme,
                      RequestPseudoHeader::kPath, RequestPseudoHeader::kAuthority,
                      RequestPseudoHeader::kNone}));
}

TEST(RequestHeaderCheck, RefusesNamesThatAreNotLowercaseTokens) {
  EXPECT_EQ(Verdict(With(kGet, "Accept", "x")), "uppercase header name");
  EXPECT_EQ(Verdict(With(kGet, "a b", "x")), "invalid character in header name");
  EXPECT_EQ(Verdict(With(kGet, "a:b", "x")), "invalid character in header name");
  EXPECT_EQ(Verdict(With(kGet, "", "x")), "empty header name");
  EXPECT_EQ(Verdict(With(kGet, "x-ok_~!#$%&'*+-.^`|", "x")), "");
}

TEST(RequestHeaderCheck, RefusesValuesWithNulCrLfOrSurroundingWhitespace) {
  EXPECT_EQ(Verdict(With(kGet, "x", std::string("a\0b", 3))), "invalid character in header value");
  EXPECT_EQ(Verdict(With(kGet, "x", "a\rb")), "invalid character in header value");
  EXPECT_EQ(Verdict(With(kGet, "x", "a\nb")), "invalid character in header value");
  EXPECT_EQ(Verdict(With(kGet, "x", " a")), "whitespace around header value");
  EXPECT_EQ(Verdict(With(kGet, "x", "a\t")), "whitespace around header value");
  EXPECT_EQ(Verdict(With(kGet, "x", "a b\tc")), "");
  EXPECT_EQ(Verdict(With(kGet, "x", "")), "");
  // Pseudo-header values too.
  EXPECT_EQ(Verdict({{":method", "GET "}, {":scheme", "http"}, {":path", "/"}}),
            "whitespace around header value");
}

TEST(RequestHeaderCheck, RefusesConnectionSpecificFieldsAndTeOtherThanTrailers) {
  for (const char* name : {"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                           "upgrade"}) {
    EXPECT_EQ(Verdict(With(kGet, name, "x")), "connection-specific header") << name;
    EXPECT_TRUE(IsConnectionSpecificField(name)) << name;
  }
  EXPECT_FALSE(IsConnectionSpecificField("content-length"));
  EXPECT_EQ(Verdict(With(kGet, "te", "gzip")), "te other than trailers");
  EXPECT_EQ(Verdict(With(kGet, "te", "trailers")), "");
}

TEST(RequestHeaderCheck, PseudoHeadersAreKnownOnceEachAndFirst) {
  EXPECT_EQ(Verdict({{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {":status", "200"}}),
            "unknown pseudo-header");
  EXPECT_EQ(Verdict({{":method", "GET"}, {":method", "GET"}, {":scheme", "http"}, {":path", "/"}}),
            "duplicate pseudo-header");
  EXPECT_EQ(Verdict({{":method", "GET"}, {"accept", "*/*"}, {":scheme", "http"}, {":path", "/"}}),
            "pseudo-header after a regular header");
}

TEST(RequestHeaderCheck, ARequestNeedsMethodSchemeAndPath) {
  EXPECT_EQ(Verdict({{":scheme", "http"}, {":path", "/"}}), "missing :method");
  EXPECT_EQ(Verdict({{":method", "GET"}, {":path", "/"}}), "missing :scheme or :path");
  EXPECT_EQ(Verdict({{":method", "GET"}, {":scheme", "http"}}), "missing :scheme or :path");
  // Present but empty counts as missing.
  EXPECT_EQ(Verdict({{":method", "GET"}, {":scheme", "http"}, {":path", ""}}),
            "missing :scheme or :path");
  EXPECT_EQ(Verdict({{":method", ""}, {":scheme", "http"}, {":path", "/"}}), "missing :method");
  // :authority is optional for other methods (a host field may stand in).
  EXPECT_EQ(Verdict({{":method", "GET"}, {":scheme", "http"}, {":path", "/"}}), "");
}

TEST(RequestHeaderCheck, AnHttpPathIsAbsoluteOrAnAsteriskForOptions) {
  constexpr std::string_view kBadPath = ":path neither an absolute path nor * for OPTIONS";
  EXPECT_EQ(Verdict({{":method", "GET"}, {":scheme", "https"}, {":path", "plaintext"}}), kBadPath);
  EXPECT_EQ(Verdict({{":method", "GET"}, {":scheme", "http"}, {":path", "?a=1"}}), kBadPath);
  EXPECT_EQ(Verdict({{":method", "GET"}, {":scheme", "http"}, {":path", "*"}}), kBadPath);
  // The method may come after the path.
  EXPECT_EQ(Verdict({{":path", "*"}, {":scheme", "http"}, {":method", "OPTIONS"}}), "");
  EXPECT_EQ(Verdict({{":method", "GET"}, {":scheme", "http"}, {":path", "//a/?q"}}), "");
  // Whatever the scheme says: the request is served as http or https.
  EXPECT_EQ(Verdict({{":method", "GET"}, {":scheme", "HTTP"}, {":path", "plaintext"}}), kBadPath);
  EXPECT_EQ(Verdict({{":method", "GET"}, {":scheme", "urn"}, {":path", "isbn:0451"}}), kBadPath);
}

TEST(RequestHeaderCheck, ConnectHasAnAuthorityAndNeitherSchemeNorPath) {
  EXPECT_EQ(Verdict({{":method", "CONNECT"}, {":authority", "example.com:443"}}), "");
  EXPECT_EQ(Verdict({{":method", "CONNECT"}}),
            "CONNECT with :scheme or :path, or without :authority");
  EXPECT_EQ(Verdict({{":method", "CONNECT"}, {":authority", "a:1"}, {":path", "/"}}),
            "CONNECT with :scheme or :path, or without :authority");
  EXPECT_EQ(Verdict({{":method", "CONNECT"}, {":authority", "a:1"}, {":scheme", "https"}}),
            "CONNECT with :scheme or :path, or without :authority");
}

TEST(RequestHeaderCheck, TrailersTakeRegularFieldsOnly) {
  EXPECT_EQ(Verdict({{"x-checksum", "abc"}, {"grpc-status", "0"}}, /*trailers=*/true), "");
  EXPECT_EQ(Verdict({{":path", "/"}}, /*trailers=*/true), "pseudo-header in trailers");
  EXPECT_EQ(Verdict({{"Bad", "x"}}, /*trailers=*/true), "uppercase header name");
}

TEST(RequestHeaderCheck, ResetStartsAFreshBlock) {
  RequestHeaderCheck check;
  check.Reset(false);
  RequestPseudoHeader pseudo;
  ASSERT_EQ(check.Check(":method", "GET", &pseudo), nullptr);
  ASSERT_EQ(check.Check("accept", "*/*", &pseudo), nullptr);
  check.Reset(false);
  EXPECT_EQ(check.Check(":method", "GET", &pseudo), nullptr);  // neither duplicate nor late
  EXPECT_FALSE(check.has_authority());
  EXPECT_STREQ(check.Finish(), "missing :scheme or :path");
}

}  // namespace
}  // namespace sluice::http2
