#include "telemetry/trace_context.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice::telemetry {
namespace {

constexpr char kValid[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceParent, ParsesTheSpecificationsExample) {
  auto p = ParseTraceParent(kValid);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->version, 0);
  EXPECT_EQ(HexId(p->trace_id.data(), 16), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(HexId(p->parent_id.data(), 8), "00f067aa0ba902b7");
  EXPECT_TRUE(p->sampled());
  auto unsampled = ParseTraceParent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
  ASSERT_TRUE(unsampled.has_value());
  EXPECT_FALSE(unsampled->sampled());
}

TEST(TraceParent, RejectsWhatTheSpecificationRejects) {
  const std::string good = kValid;
  const char* bad[] = {
      "",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",      // no flags
      "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",    // short trace id
      "00-4bf92f3577b34da6a3ce929d0e0e47366-00f067aa0ba902b7-01",  // long trace id
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // version ff
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   // zero trace id
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   // zero parent id
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   // upper-case hex
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",      // not hex
      "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",      // wrong separator
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz",  // v00 with extra fields
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 ",     // trailing space
      "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",     // later version, no '-'
  };
  for (const char* v : bad) {
    EXPECT_FALSE(ParseTraceParent(v).has_value()) << v;
  }
  EXPECT_TRUE(ParseTraceParent(good).has_value());
}

TEST(TraceParent, ALaterVersionMayCarryMoreFields) {
  auto p = ParseTraceParent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->version, 0xcc);
}

TEST(TraceParent, FormatsWhatItParses) {
  auto p = ParseTraceParent(kValid);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(FormatTraceParent(p->trace_id, p->parent_id, true), kValid);
}

TEST(TraceState, KeepsValidMembersAndOws) {
  auto s = ParseTraceState("rojo=00f067aa0ba902b7 , congo=t61rcWkgMzE,,tenant@vendor=x");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->value, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE,tenant@vendor=x");
  EXPECT_FALSE(s->truncated);
}

TEST(TraceState, AMalformedMemberDropsTheHeader) {
  for (const char* bad : {"Rojo=1", "rojo", "rojo=", "rojo=a,b", "ro jo=1", "rojo=a=b", "@vendor=1",
                          "tenant@=1", "rojo=tab\there"}) {
    EXPECT_FALSE(ParseTraceState(bad).has_value()) << bad;
  }
}

TEST(TraceState, KeepsAtMost32Members) {
  std::string v;
  for (int i = 0; i < 40; ++i) v += (i ? "," : "") + std::string("k") + std::to_string(i) + "=v";
  auto s = ParseTraceState(v);
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->truncated);
  EXPECT_EQ(std::count(s->value.begin(), s->value.end(), ','), 31);
  EXPECT_EQ(s->value.substr(0, 5), "k0=v,");
}

TEST(TraceState, OverLongIsCutLongMembersFirstThenFromTheEnd) {
  const std::string long_value(200, 'x');  // a member of 202 characters
  std::string v = "first=" + std::string(100, 'a') + ",big=" + long_value;
  for (int i = 0; i < 10; ++i) v += ",m" + std::to_string(i) + "=" + std::string(40, 'b');
  auto s = ParseTraceState(v);
  ASSERT_TRUE(s.has_value());
  EXPECT_TRUE(s->truncated);
  EXPECT_LE(s->value.size(), 512u);
  EXPECT_EQ(s->value.find("big="), std::string::npos);  // the long member went first
  EXPECT_EQ(s->value.substr(0, 6), "first=");
  EXPECT_NE(s->value.find("m0="), std::string::npos);
}

}  // namespace
}  // namespace sluice::telemetry
