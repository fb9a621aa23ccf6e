#include "http/target.h"

#include <gtest/gtest.h>

namespace sluice::http {
namespace {

TEST(SplitPathAndQuery, SplitsAtTheFirstQuestionMarkAndDropsIt) {
  const PathAndQuery parts = SplitPathAndQuery("/search?q=a?b&n=1");
  EXPECT_EQ(parts.path, "/search");
  EXPECT_EQ(parts.query, "q=a?b&n=1");
}

TEST(SplitPathAndQuery, ATargetWithoutAQueryIsAllPath) {
  const PathAndQuery parts = SplitPathAndQuery("/plaintext");
  EXPECT_EQ(parts.path, "/plaintext");
  EXPECT_TRUE(parts.query.empty());
}

TEST(SplitPathAndQuery, AnEmptyQueryOrPathStaysEmpty) {
  EXPECT_EQ(SplitPathAndQuery("/a?").path, "/a");
  EXPECT_TRUE(SplitPathAndQuery("/a?").query.empty());
  EXPECT_TRUE(SplitPathAndQuery("?x").path.empty());
  EXPECT_EQ(SplitPathAndQuery("?x").query, "x");
  EXPECT_TRUE(SplitPathAndQuery("").path.empty());
}

TEST(SplitPathAndQuery, ThePartsViewTheTargetsBytes) {
  constexpr std::string_view kTarget = "/p?q";
  const PathAndQuery parts = SplitPathAndQuery(kTarget);
  EXPECT_EQ(parts.path.data(), kTarget.data());
  EXPECT_EQ(parts.query.data(), kTarget.data() + 3);
}

}  // namespace
}  // namespace sluice::http
