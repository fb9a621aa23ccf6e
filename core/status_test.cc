#include "core/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace sluice {
namespace {

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(Status, ErrorCarriesCodeAndMessage) {
  Status s = InvalidArgumentError("bad flag --x");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: bad flag --x");
}

TEST(Status, OkCodeDropsTheMessage) {
  Status s(StatusCode::kOk, "ignored");
  EXPECT_TRUE(s.ok());
  EXPECT_TRUE(s.message().empty());
}

TEST(Status, CopiesOwnTheirMessage) {
  Status a = UnavailableError("peer reset");
  Status b = a;
  Status c;
  c = b;
  b = OkStatus();
  EXPECT_TRUE(b.ok());
  EXPECT_EQ(a.ToString(), "UNAVAILABLE: peer reset");
  EXPECT_EQ(c, a);
  const Status& same = c;
  c = same;  // self-assignment keeps the value
  EXPECT_EQ(c.message(), "peer reset");
}

TEST(Status, MovedFromKeepsItsCodeAndLosesItsMessage) {
  Status a = InternalError("broken");
  Status b = std::move(a);
  EXPECT_EQ(b.message(), "broken");
  EXPECT_EQ(a.code(), StatusCode::kInternal);  // NOLINT: reading a moved-from value on purpose
  EXPECT_TRUE(a.message().empty());
  Status c = NotFoundError("x");
  c = std::move(b);
  EXPECT_EQ(c.ToString(), "INTERNAL: broken");
}

TEST(Status, AnErrorWithoutAMessageIsStillAnError) {
  Status s(StatusCode::kCancelled, "");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "CANCELLED: ");
}

TEST(StatusOr, HoldsAValue) {
  StatusOr<std::unique_ptr<int>> v(std::make_unique<int>(7));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(**v, 7);
  EXPECT_TRUE(v.status().ok());
}

TEST(StatusOr, HoldsAnError) {
  StatusOr<int> v(NotFoundError("no such file"));
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kNotFound);
}

TEST(StatusOr, BuiltFromOkStatusBecomesInternalError) {
  StatusOr<int> v{OkStatus()};
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace sluice
