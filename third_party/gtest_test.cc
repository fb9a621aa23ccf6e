// //third_party:gtest links googletest and gmock with a main().
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace {

using ::testing::ElementsAre;
using ::testing::Return;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int NowMs() const = 0;
};

class MockClock : public Clock {
 public:
  MOCK_METHOD(int, NowMs, (), (const, override));
};

TEST(GoogleTest, MatchersCompareContainers) {
  EXPECT_THAT((std::vector<int>{1, 2, 3}), ElementsAre(1, 2, 3));
}

TEST(GoogleMock, MockReturnsConfiguredValue) {
  MockClock clock;
  EXPECT_CALL(clock, NowMs()).WillOnce(Return(42));
  EXPECT_EQ(clock.NowMs(), 42);
}

}  // namespace
