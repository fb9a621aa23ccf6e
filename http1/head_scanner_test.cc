#include "http1/head_scanner.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/pipe.h"
#include "core/testing.h"
#include "http1/testing/segmented_input.h"

namespace sluice::http1 {
namespace {

using ::sluice::http1::testing::SegmentedInput;

class HeadScannerTest : public ::sluice::testing::DiagnosticPoolTest {};

// What a scan ended with, as text: "incomplete", "fault N", "refused", or the head the test start
// line parsed (where it ends, heads skipped, its start line and fields).
struct TestOutcome {
  std::string text = "incomplete";
  bool incomplete() const { return text == "incomplete"; }
};

// A start line for the tests: lines starting "GO" are valid and "SKIP" heads are skipped (an
// interim response); anything else is refused.
struct TestLine {
  using Outcome = TestOutcome;

  Outcome Fail(HeadFault fault) { return {"fault " + std::to_string(static_cast<int>(fault))}; }
  Outcome CheckStartLine(std::string_view line) {
    checked.emplace_back(line);
    if (line.starts_with("GO") || line == "SKIP") return {};
    return {"refused"};
  }
  Outcome Head(const ScannedHead& head) {
    linearized += head.linearized ? 1 : 0;
    if (head.start_line() == "SKIP") return {};
    FramingFields framing(FramingFields::CodingAfterChunked::kRefused);
    std::vector<Header> fields;
    const std::string_view bad =
        ParseFieldLines(head, &framing, &fields, [](const Header&) { return std::string_view(); });
    if (!bad.empty()) return {"bad field: " + std::string(bad)};
    std::string text = "head end=" + std::to_string(head.end) +
                       " skipped=" + std::to_string(head.skipped) + " line='" +
                       std::string(head.start_line()) + "'";
    for (const Header& h : fields) {
      text += " [" + std::string(h.name) + "|" + std::string(h.value) + "]";
    }
    return {text};
  }

  std::vector<std::string> checked;  // every start line CheckStartLine saw
  int linearized = 0;                // heads handed over as a copy
};

constexpr HeadScanLimits kLimits{.max_start_line = 32,
                                 .max_header_bytes = 64,
                                 .max_header_count = 3,
                                 .max_leading_empty_lines = 1};

std::string Fault(HeadFault fault) { return "fault " + std::to_string(static_cast<int>(fault)); }

std::string ScanOnce(std::string_view bytes, HeadScanLimits limits = kLimits) {
  HeadScanner scanner(limits);
  TestLine line;
  return scanner.Scan(ContiguousInput(bytes), 0, bytes.size(), line).text;
}

TEST_F(HeadScannerTest, HandsOverTheHeadInPlaceWhenContiguous) {
  const std::string_view bytes = "GO a\r\nA: 1\r\nB:  two \r\n\r\nbody";
  HeadScanner scanner(kLimits);
  TestLine line;
  EXPECT_EQ(scanner.Scan(ContiguousInput(bytes), 0, bytes.size(), line).text,
            "head end=24 skipped=0 line='GO a' [A|1] [B|two]");
  EXPECT_EQ(line.linearized, 0);
}

TEST_F(HeadScannerTest, SplitAtEveryByteGivesTheSameHead) {
  const std::string bytes = "\r\nGO split\r\nA: 1\r\nB: 2\r\n\r\nrest";
  const std::string want = ScanOnce(bytes);
  ASSERT_EQ(want, "head end=26 skipped=0 line='GO split' [A|1] [B|2]");
  for (size_t k = 0; k <= bytes.size(); ++k) {
    SegmentedInput input(&pool(),
                         {std::string_view(bytes).substr(0, k), std::string_view(bytes).substr(k)});
    const BufferSequence& buffer = input.Read();
    HeadScanner scanner(kLimits);
    TestLine line;
    EXPECT_EQ(scanner.Scan(buffer, 0, buffer.size(), line).text, want) << "split at " << k;
    // Only a head that spans the two segments is copied; the empty line before it is not part.
    EXPECT_EQ(line.linearized, k > 2 && k < 26 ? 1 : 0) << "split at " << k;
  }
}

TEST_F(HeadScannerTest, CopiesAStartLineThatStraddlesSegmentsWhole) {
  SegmentedInput input(&pool(), {"GO str", "add", "les\r\nA: 1\r\n\r\n"});
  const BufferSequence& buffer = input.Read();
  HeadScanner scanner(kLimits);
  TestLine line;
  EXPECT_EQ(scanner.Scan(buffer, 0, buffer.size(), line).text,
            "head end=22 skipped=0 line='GO straddles' [A|1]");
  EXPECT_EQ(line.checked, std::vector<std::string>{"GO straddles"});
  EXPECT_EQ(line.linearized, 1);
}

TEST_F(HeadScannerTest, ResumesByteByByteWithTheSameResult) {
  const std::string bytes = "SKIP\r\n\r\nGO b\r\nA: 1\r\n\r\n";
  HeadScanner scanner(kLimits);
  TestLine line;
  std::string last;
  for (size_t k = 1; k <= bytes.size(); ++k) {
    last = scanner.Scan(ContiguousInput(std::string_view(bytes).substr(0, k)), 0, k, line).text;
    if (k < bytes.size()) {
      ASSERT_EQ(last, "incomplete") << "at " << k;
    }
  }
  EXPECT_EQ(last, ScanOnce(bytes));
  // Each start line checked once: resuming does not look at a line twice.
  EXPECT_EQ(line.checked, (std::vector<std::string>{"SKIP", "GO b"}));
}

TEST_F(HeadScannerTest, SkipsHeadsTheStartLineSaysToSkip) {
  EXPECT_EQ(ScanOnce("SKIP\r\nX: 1\r\n\r\nSKIP\r\n\r\nGO\r\n\r\n"),
            "head end=28 skipped=2 line='GO'");
  EXPECT_EQ(ScanOnce("SKIP\r\n\r\n"), "incomplete");
}

TEST_F(HeadScannerTest, SkipsLeadingEmptyLinesUpToTheLimit) {
  EXPECT_EQ(ScanOnce("\r\nGO\r\n\r\n"), "head end=8 skipped=0 line='GO'");
  EXPECT_EQ(ScanOnce("\r\n\r\nGO\r\n\r\n"), Fault(HeadFault::kTooManyEmptyLines));
  EXPECT_EQ(ScanOnce("\r\nGO\r\n\r\n", {.max_leading_empty_lines = 0}),
            Fault(HeadFault::kTooManyEmptyLines));
}

TEST_F(HeadScannerTest, RefusesBareLineEndings) {
  EXPECT_EQ(ScanOnce("GO\n\r\n"), Fault(HeadFault::kBareLf));
  EXPECT_EQ(ScanOnce("GO\r\nA: 1\n\r\n"), Fault(HeadFault::kBareLf));
  EXPECT_EQ(ScanOnce("GO\r\nA: 1\r\n\n"), Fault(HeadFault::kBareLf));
  EXPECT_EQ(ScanOnce("GO\r\nA: 1\rB: 2\r\n\r\n"), "bad field: bare CR in field value");
}

TEST_F(HeadScannerTest, PassesOnWhatTheStartLineRefuses) {
  EXPECT_EQ(ScanOnce("NO\r\n"), "refused");
}

TEST_F(HeadScannerTest, EnforcesLimitsEvenWhileIncomplete) {
  // A start line of exactly max_start_line bytes is fine, also while its CRLF is incomplete.
  const std::string at_limit = "GO" + std::string(30, 'x');
  EXPECT_EQ(ScanOnce(at_limit + "\r"), "incomplete");
  EXPECT_EQ(ScanOnce(at_limit + "\r\n\r\n"), "head end=36 skipped=0 line='" + at_limit + "'");
  EXPECT_EQ(ScanOnce(at_limit + "x"), Fault(HeadFault::kStartLineTooLong));
  EXPECT_EQ(ScanOnce(at_limit + "x\n"), Fault(HeadFault::kStartLineTooLong));
  EXPECT_EQ(ScanOnce("GO\r\nX: " + std::string(61, 'y')), Fault(HeadFault::kHeaderSectionTooLarge));
  EXPECT_EQ(ScanOnce("GO\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n"), Fault(HeadFault::kTooManyFields));
  EXPECT_EQ(ScanOnce("GO\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n"),
            "head end=24 skipped=0 line='GO' [A|1] [B|2] [C|3]");
}

TEST_F(HeadScannerTest, RefusesAnOffsetPastTheEnd) {
  HeadScanner scanner(kLimits);
  TestLine line;
  EXPECT_EQ(scanner.Scan(ContiguousInput("GO"), 3, 2, line).text, Fault(HeadFault::kOffsetPastEnd));
}

TEST_F(HeadScannerTest, StartsOverOnInputShorterThanScanned) {
  HeadScanner scanner(kLimits);
  TestLine line;
  EXPECT_TRUE(scanner.Scan(ContiguousInput("GO long\r\nA"), 0, 10, line).incomplete());
  EXPECT_EQ(scanner.Scan(ContiguousInput("GO\r\n\r\n"), 0, 6, line).text,
            "head end=6 skipped=0 line='GO'");
}

// The framing fields.

constexpr auto kRefused = FramingFields::CodingAfterChunked::kRefused;
constexpr auto kAllowed = FramingFields::CodingAfterChunked::kAllowed;

// Feeds `fields` to *framing. Returns "ok" or the reason the first refused one is refused.
std::string TakeAll(FramingFields* framing, std::vector<Header> fields) {
  for (const Header& h : fields) {
    const std::string_view bad = framing->Take(h);
    if (!bad.empty()) return std::string(bad);
  }
  return "ok";
}

std::string TakeAll(std::vector<Header> fields) {
  FramingFields framing(kRefused);
  return TakeAll(&framing, std::move(fields));
}

TEST(FramingFieldsTest, ParsesContentLength) {
  FramingFields framing(kRefused);
  ASSERT_EQ(TakeAll(&framing, {{"Content-Length", "18446744073709551615"}}), "ok");
  EXPECT_TRUE(framing.content_length_seen());
  EXPECT_EQ(framing.content_length(), UINT64_MAX);
  EXPECT_FALSE(framing.transfer_encoding_seen());
}

TEST(FramingFieldsTest, RefusesBadContentLength) {
  for (std::string_view value : {"", "-1", "+5", "5 ", "0x10", "5, 5", "1.0",
                                 "18446744073709551616", "99999999999999999999"}) {
    EXPECT_EQ(TakeAll({{"content-length", value}}), "invalid Content-Length") << value;
  }
}

TEST(FramingFieldsTest, RefusesRepeatedContentLengthEvenIfEqual) {
  EXPECT_EQ(TakeAll({{"Content-Length", "5"}, {"CONTENT-LENGTH", "5"}}), "repeated Content-Length");
}

TEST(FramingFieldsTest, ParsesTransferCodings) {
  FramingFields framing(kRefused);
  ASSERT_EQ(TakeAll(&framing, {{"Transfer-Encoding", "gzip, ,chunked"}}), "ok");
  EXPECT_TRUE(framing.transfer_encoding_seen());
  EXPECT_TRUE(framing.chunked_last());
  EXPECT_TRUE(framing.other_coding());
}

TEST(FramingFieldsTest, RefusesChunkedTwiceEvenAcrossLines) {
  EXPECT_EQ(TakeAll({{"Transfer-Encoding", "chunked, chunked"}}), "chunked applied more than once");
  FramingFields framing(kAllowed);
  EXPECT_EQ(
      TakeAll(&framing,
              {{"Transfer-Encoding", "chunked"}, {"te", "x"}, {"transfer-encoding", "chunked"}}),
      "chunked applied more than once");
}

TEST(FramingFieldsTest, CodingAfterChunkedIsRefusedOrAllowedAsAsked) {
  EXPECT_EQ(TakeAll({{"Transfer-Encoding", "chunked, gzip"}}),
            "chunked is not the final transfer coding");
  FramingFields framing(kAllowed);
  ASSERT_EQ(TakeAll(&framing, {{"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "gzip"}}),
            "ok");
  EXPECT_FALSE(framing.chunked_last());
}

TEST(FramingFieldsTest, RefusesEmptyOrInvalidTransferEncoding) {
  EXPECT_EQ(TakeAll({{"Transfer-Encoding", ""}}), "empty Transfer-Encoding");
  EXPECT_EQ(TakeAll({{"Transfer-Encoding", " , ,"}}), "empty Transfer-Encoding");
  EXPECT_EQ(TakeAll({{"Transfer-Encoding", "gz(ip), chunked"}}), "invalid transfer coding");
}

TEST(FramingFieldsTest, ReportsTransferEncodingConflicts) {
  FramingFields both(kRefused);
  ASSERT_EQ(TakeAll(&both, {{"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}}), "ok");
  EXPECT_EQ(both.Conflict(1, "in 1.0"), "Transfer-Encoding with Content-Length");
  FramingFields chunked(kRefused);
  ASSERT_EQ(TakeAll(&chunked, {{"Transfer-Encoding", "chunked"}}), "ok");
  EXPECT_EQ(chunked.Conflict(0, "in 1.0"), "in 1.0");
  EXPECT_EQ(chunked.Conflict(1, "in 1.0"), "");
  FramingFields length(kRefused);
  ASSERT_EQ(TakeAll(&length, {{"Content-Length", "5"}}), "ok");
  EXPECT_EQ(length.Conflict(0, "in 1.0"), "");
}

TEST(FramingFieldsTest, KeepAliveFollowsVersionAndConnection) {
  FramingFields none(kRefused);
  EXPECT_TRUE(none.KeepAlive(1));
  EXPECT_FALSE(none.KeepAlive(0));
  FramingFields keep(kRefused);
  ASSERT_EQ(TakeAll(&keep, {{"Connection", "Keep-Alive"}}), "ok");
  EXPECT_TRUE(keep.KeepAlive(0));
  FramingFields close(kRefused);
  ASSERT_EQ(TakeAll(&close, {{"Connection", "keep-alive, upgrade"}, {"connection", "CLOSE"}}),
            "ok");
  EXPECT_FALSE(close.KeepAlive(0));
  EXPECT_FALSE(close.KeepAlive(1));
}

TEST(FramingFieldsTest, IgnoresOtherFields) {
  FramingFields framing(kRefused);
  ASSERT_EQ(TakeAll(&framing, {{"Content-Lengths", "x"}, {"X-Connection", "close"}, {"Host", "a"}}),
            "ok");
  EXPECT_FALSE(framing.content_length_seen());
  EXPECT_TRUE(framing.KeepAlive(1));
}

}  // namespace
}  // namespace sluice::http1
