#include "http/router.h"

#include <gtest/gtest.h>

namespace sluice::http {
namespace {

Handler Tag(int* out, int value) {
  return [out, value](Request&, Response&) { *out = value; };
}

void Call(const RouteMatch& m) {
  Request req;
  Response res;
  (*m.handler)(req, res);
}

TEST(Router, MatchesLiteralRoutes) {
  Router r;
  int hit = 0;
  ASSERT_TRUE(r.Add("GET", "/plaintext", Tag(&hit, 1)).ok());
  RouteMatch m = r.Match("GET", "/plaintext");
  ASSERT_EQ(m.kind, RouteMatch::Kind::kFound);
  Call(m);
  EXPECT_EQ(hit, 1);
  EXPECT_EQ(m.route_template, "/plaintext");
  EXPECT_EQ(r.Match("GET", "/plaintext/").kind, RouteMatch::Kind::kNotFound);
  EXPECT_EQ(r.Match("GET", "/other").kind, RouteMatch::Kind::kNotFound);
}

TEST(Router, ExtractsPathParameters) {
  Router r;
  int hit = 0;
  ASSERT_TRUE(r.Add("GET", "/users/{id}/posts/{post}", Tag(&hit, 1)).ok());
  RouteMatch m = r.Match("GET", "/users/7/posts/abc");
  ASSERT_EQ(m.kind, RouteMatch::Kind::kFound);
  ASSERT_EQ(m.params.size(), 2u);
  EXPECT_EQ(m.params[0].first, "id");
  EXPECT_EQ(m.params[0].second, "7");
  EXPECT_EQ(m.params[1].second, "abc");
  EXPECT_EQ(r.Match("GET", "/users//posts/abc").kind, RouteMatch::Kind::kNotFound);
}

TEST(Router, LiteralSegmentsBeatParametersWhateverTheOrder) {
  Router r;
  int hit = 0;
  ASSERT_TRUE(r.Add("GET", "/users/{id}", Tag(&hit, 1)).ok());
  ASSERT_TRUE(r.Add("GET", "/users/me", Tag(&hit, 2)).ok());
  Call(r.Match("GET", "/users/me"));
  EXPECT_EQ(hit, 2);
  Call(r.Match("GET", "/users/42"));
  EXPECT_EQ(hit, 1);
}

TEST(Router, RestParameterTakesTheRemainder) {
  Router r;
  int hit = 0;
  ASSERT_TRUE(r.Add("GET", "/static/{file...}", Tag(&hit, 1)).ok());
  RouteMatch m = r.Match("GET", "/static/css/site.css");
  ASSERT_EQ(m.kind, RouteMatch::Kind::kFound);
  EXPECT_EQ(m.params[0].second, "css/site.css");
}

TEST(Router, WrongMethodYieldsMethodNotAllowedWithAllow) {
  Router r;
  int hit = 0;
  ASSERT_TRUE(r.Add("GET", "/echo", Tag(&hit, 1)).ok());
  ASSERT_TRUE(r.Add("PUT", "/echo", Tag(&hit, 2)).ok());
  RouteMatch m = r.Match("DELETE", "/echo");
  EXPECT_EQ(m.kind, RouteMatch::Kind::kMethodNotAllowed);
  EXPECT_EQ(m.allow, "GET, PUT");
}

TEST(Router, AnyMethodRouteMatchesEveryMethod) {
  Router r;
  int hit = 0;
  ASSERT_TRUE(r.Add("*", "/any", Tag(&hit, 1)).ok());
  EXPECT_EQ(r.Match("PATCH", "/any").kind, RouteMatch::Kind::kFound);
}

TEST(Router, RejectsMalformedTemplates) {
  Router r;
  EXPECT_EQ(r.Add("GET", "nope", nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Add("GET", "/a/{id", nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Add("GET", "/a/{rest...}/b", nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Add("GET", "/a{b}", nullptr).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(r.Add("GET", "/a", nullptr).ok());
  EXPECT_EQ(r.Add("GET", "/a", nullptr).code(), StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace sluice::http
