#include "loadgen/report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace sluice::loadgen {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(Report, Base64MatchesRfc4648Vectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
  EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Encode(std::string("\xff\x00\xfe", 3)), "/wD+");
}

RunResult SampleResult() {
  RunResult r;
  r.requests_sent = r.requests_completed = 3;
  r.status_codes[200] = 2;
  r.status_codes[503] = 1;
  r.duration = std::chrono::seconds(1);
  for (uint64_t v : {1'000'000u, 2'000'000u, 3'000'000u}) {
    r.latency.Record(v);
    r.corrected_latency.Record(v * 2);
  }
  r.first_error = "UNAVAILABLE: \"quoted\"\n";
  return r;
}

TEST(Report, JsonCarriesCountsPercentilesAndHistograms) {
  CliOptions options;
  options.url = "http://127.0.0.1:1/";
  const std::string json = FormatJson(options, SampleResult());
  EXPECT_THAT(json, HasSubstr("\"completed\":3"));
  EXPECT_THAT(json, HasSubstr("\"200\":2"));
  EXPECT_THAT(json, HasSubstr("\"5xx\":1"));
  EXPECT_THAT(json, HasSubstr("\"rps\":3"));
  EXPECT_THAT(json, HasSubstr("\"99.99\":"));
  EXPECT_THAT(json, HasSubstr("\"histogram\":\"U0xI"));  // base64 of "SLH"
  EXPECT_THAT(json, HasSubstr("\\\"quoted\\\"\\n"));
}

TEST(Report, JsonCarriesTheWallClockStartAndASpectrumPerLatency) {
  CliOptions options;
  options.url = "http://127.0.0.1:1/";
  RunResult r = SampleResult();
  r.start_unix_ns = 1'764'600'000'000'000'000;
  const std::string json = FormatJson(options, r);
  EXPECT_THAT(json, HasSubstr("\"start_unix_ns\":1764600000000000000"));
  EXPECT_THAT(json, HasSubstr("\"spectrum\":[[0,"));
}

TEST(Report, SpectrumIsLogSpacedInTheTailAndEndsAtTheMaximum) {
  Histogram h;
  for (uint64_t v = 1; v <= 10'000; ++v) h.Record(v * 1'000);
  const auto points = PercentileSpectrum(h);
  // 1/(1-p) from 10^0 to 10^4 in steps of 10^0.1: 41 points, then the maximum.
  ASSERT_EQ(points.size(), 42u);
  EXPECT_DOUBLE_EQ(points[0].first, 0);
  EXPECT_NEAR(points[10].first, 90, 1e-9);
  EXPECT_NEAR(points[20].first, 99, 1e-9);
  EXPECT_NEAR(points[40].first, 99.99, 1e-9);
  EXPECT_EQ(points.back(), std::make_pair(100.0, h.max()));
  for (size_t i = 1; i < points.size(); ++i) {
    EXPECT_GT(points[i].first, points[i - 1].first);
    EXPECT_GE(points[i].second, points[i - 1].second);
  }
  EXPECT_TRUE(PercentileSpectrum(Histogram()).empty());
}

TEST(Report, SummaryShowsBothLatenciesAtAConstantRate) {
  CliOptions options;
  options.url = "http://127.0.0.1:1/";
  options.spec.rate = 100;
  const std::string text = FormatSummary(options, SampleResult(), {});
  EXPECT_THAT(text, HasSubstr("(corrected)"));
  EXPECT_THAT(text, HasSubstr("(uncorrected)"));
  EXPECT_THAT(text, HasSubstr("2xx - 2"));
  EXPECT_THAT(text, HasSubstr("503 - 1"));
  EXPECT_THAT(text, HasSubstr("99.99%"));
}

TEST(Report, SummaryAndJsonCountRequestsTheScheduleNeverSent) {
  CliOptions options;
  options.url = "http://127.0.0.1:1/";
  options.spec.rate = 100;
  RunResult r = SampleResult();
  EXPECT_THAT(FormatSummary(options, r, {}), Not(HasSubstr("unsent")));
  EXPECT_THAT(FormatJson(options, r), HasSubstr("\"unfinished\":0,\"unsent\":0}"));
  r.requests_unsent = 97;
  EXPECT_THAT(FormatSummary(options, r, {}),
              HasSubstr("3 sent, 3 completed, 0 failed, 0 unfinished; 97 unsent (intended before "
                        "the end, still behind schedule when the drain time ended)\n"));
  EXPECT_THAT(FormatJson(options, r), HasSubstr("\"unfinished\":0,\"unsent\":97}"));
}

TEST(Report, RateSamplerSkipsWarmupAndSamplesWholeWindows) {
  RateSampler sampler(std::chrono::seconds(1));
  auto at = [](int ms, uint64_t completed, bool warming) {
    Progress p;
    p.elapsed = std::chrono::milliseconds(ms);
    p.requests_completed = completed;
    p.warming_up = warming;
    return p;
  };
  sampler.Add(at(250, 0, true));
  sampler.Add(at(500, 0, false));
  sampler.Add(at(1000, 500, false));
  EXPECT_DOUBLE_EQ(sampler.live_rate(), 1000);
  EXPECT_TRUE(sampler.samples().empty());
  sampler.Add(at(1500, 1500, false));
  ASSERT_EQ(sampler.samples().size(), 1u);
  EXPECT_DOUBLE_EQ(sampler.samples()[0], 1500);
}

TEST(Report, ProgressLineShowsTheP99OnceKnownAndWhetherItIsABound) {
  Progress p;
  p.elapsed = std::chrono::milliseconds(2500);
  p.requests_completed = 1234;
  p.errors = 1;
  EXPECT_EQ(FormatProgressLine(p, 500), "[   2.5s] 1234 completed, 500 req/s, 1 errors");
  p.p99_ns = 1'250'000;
  EXPECT_EQ(FormatProgressLine(p, 500),
            "[   2.5s] 1234 completed, 500 req/s, 1 errors, p99 1.25ms");
  p.p99_is_bound = true;  // several agents: the largest of their p99s
  EXPECT_THAT(FormatProgressLine(p, 500), HasSubstr(", p99 <= 1.25ms"));
}

}  // namespace
}  // namespace sluice::loadgen
