#include "http1/chunked_decoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <span>
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

class ChunkedDecoderTest : public ::sluice::testing::DiagnosticPoolTest {};

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string Join(const std::vector<std::span<const uint8_t>>& data) {
  std::string out;
  for (std::span<const uint8_t> piece : data) {
    EXPECT_FALSE(piece.empty());
    out.append(reinterpret_cast<const char*>(piece.data()), piece.size());
  }
  return out;
}

// What decoding produced, for comparing ways of feeding the same input.
struct Decoded {
  ChunkedStatus status = ChunkedStatus::kNeedMore;
  size_t consumed = 0;
  uint16_t code = 0;
  std::string reason;
  std::string body;
  std::string trailers;

  std::string ToString() const {
    return "status=" + std::to_string(static_cast<int>(status)) +
           " consumed=" + std::to_string(consumed) + " code=" + std::to_string(code) + " reason='" +
           reason + "' body='" + body + "' trailers='" + trailers + "'";
  }
};

std::string DescribeTrailers(const ChunkedDecoder& decoder) {
  std::string s;
  for (const Header& h : decoder.trailers()) {
    s += "[" + std::string(h.name) + "|" + std::string(h.value) + "]";
  }
  return s;
}

Decoded AllAtOnce(std::string_view input, ChunkedLimits limits = {}) {
  ChunkedDecoder decoder(limits);
  std::vector<std::span<const uint8_t>> data;
  const ChunkedOutcome r = decoder.Decode(Bytes(input), &data);
  return {r.status,      r.consumed,
          r.status_code, std::string(r.reason),
          Join(data),    DescribeTrailers(decoder)};
}

Decoded ByteAtATime(std::string_view input, ChunkedLimits limits = {}) {
  ChunkedDecoder decoder(limits);
  Decoded d;
  std::vector<std::span<const uint8_t>> data;
  for (size_t i = 0; i < input.size(); ++i) {
    data.clear();
    const ChunkedOutcome r = decoder.Decode(Bytes(input.substr(i, 1)), &data);
    d.consumed += r.consumed;
    d.body += Join(data);
    d.status = r.status;
    d.code = r.status_code;
    d.reason = std::string(r.reason);
    if (!r.need_more()) break;
  }
  d.trailers = DescribeTrailers(decoder);
  return d;
}

void ExpectRejected(std::string_view input, uint16_t code, std::string_view reason,
                    ChunkedLimits limits = {}) {
  const Decoded d = AllAtOnce(input, limits);
  EXPECT_EQ(d.status, ChunkedStatus::kError) << d.ToString() << "\nfor: " << input;
  EXPECT_EQ(d.code, code) << d.ToString() << "\nfor: " << input;
  EXPECT_THAT(d.reason, HasSubstr(std::string(reason))) << input;
  // One byte at a time finds the same error.
  const Decoded slow = ByteAtATime(input, limits);
  EXPECT_EQ(slow.code, code) << slow.ToString();
  EXPECT_EQ(slow.reason, d.reason);
}

const std::vector<std::string>& ValidBodies() {
  static const auto* bodies = new std::vector<std::string>{
      "0\r\n\r\n",
      "5\r\nhello\r\n0\r\n\r\n",
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
      "a\r\n0123456789\r\nA\r\nabcdefghij\r\n0000\r\n\r\n",
      "3;name=value\r\nabc\r\n2 ; quoted=\"a b\";flag\r\nde\r\n0;last\r\n\r\n",
      "4\r\nwiki\r\n0\r\nExpires: never\r\nX-Checksum:  abc \r\n\r\n",
      "1\r\n\r\r\n1\r\n\n\r\n0\r\n\r\n",  // data may contain CR and LF
      "1F\r\n" + std::string(31, 'x') + "\r\n0\r\n\r\n",
  };
  return *bodies;
}

TEST_F(ChunkedDecoderTest, DecodesChunksAndStopsAtTheEnd) {
  const std::string body = "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
  const std::string next = "GET / HTTP/1.1\r\n";
  ChunkedDecoder decoder;
  std::vector<std::span<const uint8_t>> data;
  const std::string input = body + next;
  const ChunkedOutcome r = decoder.Decode(Bytes(input), &data);
  ASSERT_TRUE(r.done()) << r.reason;
  EXPECT_EQ(r.consumed, body.size());
  EXPECT_EQ(Join(data), "hello world");
  EXPECT_EQ(decoder.body_bytes(), 11u);
  EXPECT_TRUE(decoder.trailers().empty());
  ASSERT_EQ(data.size(), 2u);
  // Zero-copy: the data points into the input.
  EXPECT_EQ(reinterpret_cast<const char*>(data[0].data()), input.data() + 3);
}

TEST_F(ChunkedDecoderTest, ExposesTrailers) {
  const Decoded d = AllAtOnce("4\r\nwiki\r\n0\r\nExpires: never\r\nX-Checksum:  abc \r\n\r\n");
  EXPECT_EQ(d.status, ChunkedStatus::kDone);
  EXPECT_EQ(d.body, "wiki");
  EXPECT_EQ(d.trailers, "[Expires|never][X-Checksum|abc]");
}

TEST_F(ChunkedDecoderTest, IgnoresExtensions) {
  const Decoded d =
      AllAtOnce("3;name=value\r\nabc\r\n2 ; quoted=\"a b\";flag\r\nde\r\n0;last\r\n\r\n");
  EXPECT_EQ(d.status, ChunkedStatus::kDone) << d.ToString();
  EXPECT_EQ(d.body, "abcde");
}

TEST_F(ChunkedDecoderTest, AcceptsUpperAndLowerCaseHex) {
  EXPECT_EQ(AllAtOnce("a\r\n0123456789\r\nA\r\nabcdefghij\r\n0\r\n\r\n").body,
            "0123456789abcdefghij");
}

TEST_F(ChunkedDecoderTest, ByteAtATimeEqualsAllAtOnce) {
  for (const std::string& body : ValidBodies()) {
    const Decoded all = AllAtOnce(body);
    ASSERT_EQ(all.status, ChunkedStatus::kDone) << all.ToString() << "\n" << body;
    EXPECT_EQ(all.consumed, body.size());
    EXPECT_EQ(ByteAtATime(body).ToString(), all.ToString()) << body;
  }
}

TEST_F(ChunkedDecoderTest, SplitAtEveryByteAcrossSegmentsEqualsAllAtOnce) {
  for (const std::string& body : ValidBodies()) {
    const Decoded all = AllAtOnce(body);
    const std::string_view bytes(body);
    for (size_t k = 0; k <= body.size(); ++k) {
      SegmentedInput input(&pool(), {bytes.substr(0, k), bytes.substr(k)});
      ChunkedDecoder decoder;
      std::vector<std::span<const uint8_t>> data;
      const ChunkedOutcome r = decoder.Decode(input.Read(), 0, &data);
      const Decoded d{r.status,      r.consumed,
                      r.status_code, std::string(r.reason),
                      Join(data),    DescribeTrailers(decoder)};
      ASSERT_EQ(d.ToString(), all.ToString()) << "split at " << k << "\n" << body;
    }
  }
}

TEST_F(ChunkedDecoderTest, ContinuesAcrossReadsThroughPipe) {
  // The connection's loop: decode what arrived, use the data, AdvanceTo(consumed), read more.
  const std::string body = "5\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nT: v\r\n\r\n";
  SegmentedInput input(&pool());
  ChunkedDecoder decoder;
  std::string out;
  ChunkedOutcome r;
  for (size_t fed = 0; fed < body.size();) {
    const size_t n = std::min<size_t>(3, body.size() - fed);
    input.Append(std::string_view(body).substr(fed, n));
    fed += n;
    std::vector<std::span<const uint8_t>> data;
    r = decoder.Decode(input.Read(), 0, &data);
    out += Join(data);
    input.Consume(r.consumed);
    if (!r.need_more()) break;
  }
  ASSERT_TRUE(r.done()) << r.reason;
  EXPECT_EQ(out, "hello0123456789abcdef");
  EXPECT_EQ(DescribeTrailers(decoder), "[T|v]");
}

TEST_F(ChunkedDecoderTest, DecodesFromAnOffset) {
  SegmentedInput input(&pool(), {"HEAD", "3\r\nabc\r\n0\r\n\r\nNEXT"});
  ChunkedDecoder decoder;
  std::vector<std::span<const uint8_t>> data;
  const ChunkedOutcome r = decoder.Decode(input.Read(), 4, &data);
  ASSERT_TRUE(r.done());
  EXPECT_EQ(r.consumed, 13u);
  EXPECT_EQ(Join(data), "abc");
}

TEST_F(ChunkedDecoderTest, StopsAtDataBudget) {
  const std::string body = "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
  ChunkedDecoder decoder;
  std::vector<std::span<const uint8_t>> data;
  ChunkedOutcome r = decoder.Decode(Bytes(body), &data, /*max_data=*/3);
  ASSERT_TRUE(r.need_more());
  EXPECT_EQ(Join(data), "hel");
  EXPECT_EQ(r.consumed, 6u);  // "5\r\nhel"
  size_t offset = r.consumed;
  data.clear();
  r = decoder.Decode(Bytes(std::string_view(body).substr(offset)), &data, /*max_data=*/4);
  ASSERT_TRUE(r.need_more());
  EXPECT_EQ(Join(data), "lo w");
  offset += r.consumed;
  data.clear();
  r = decoder.Decode(Bytes(std::string_view(body).substr(offset)), &data);
  ASSERT_TRUE(r.done());
  EXPECT_EQ(Join(data), "orld");
  EXPECT_EQ(offset + r.consumed, body.size());
}

TEST_F(ChunkedDecoderTest, ConsumesNothingAfterDone) {
  ChunkedDecoder decoder;
  std::vector<std::span<const uint8_t>> data;
  ASSERT_TRUE(decoder.Decode(Bytes("0\r\n\r\n"), &data).done());
  const ChunkedOutcome r = decoder.Decode(Bytes("5\r\nhello"), &data);
  EXPECT_TRUE(r.done());
  EXPECT_EQ(r.consumed, 0u);
  EXPECT_TRUE(data.empty());
}

TEST_F(ChunkedDecoderTest, ResetStartsANewBody) {
  ChunkedDecoder decoder;
  std::vector<std::span<const uint8_t>> data;
  ASSERT_TRUE(decoder.Decode(Bytes("1\r\na\r\n0\r\nT: 1\r\n\r\n"), &data).done());
  decoder.Reset();
  EXPECT_TRUE(decoder.trailers().empty());
  EXPECT_EQ(decoder.body_bytes(), 0u);
  data.clear();
  ASSERT_TRUE(decoder.Decode(Bytes("2\r\nbc\r\n0\r\n\r\n"), &data).done());
  EXPECT_EQ(Join(data), "bc");
}

TEST_F(ChunkedDecoderTest, IncompleteInputNeedsMore) {
  const std::string body = "5;x=y\r\nhello\r\n0\r\nT: v\r\n\r\n";
  for (size_t k = 0; k < body.size(); ++k) {
    const Decoded d = AllAtOnce(std::string_view(body).substr(0, k));
    EXPECT_EQ(d.status, ChunkedStatus::kNeedMore) << "prefix " << k;
    EXPECT_EQ(d.consumed, k);
  }
}

TEST_F(ChunkedDecoderTest, RejectsInvalidChunkSizes) {
  ExpectRejected("x\r\n", 400, "invalid chunk size");
  ExpectRejected("\r\n", 400, "invalid chunk size");
  ExpectRejected(";ext\r\n", 400, "invalid chunk size");
  ExpectRejected("-1\r\n", 400, "invalid chunk size");
  ExpectRejected("+1\r\n", 400, "invalid chunk size");
  ExpectRejected("0x5\r\n", 400, "invalid chunk size");
  ExpectRejected("5x\r\nhello\r\n", 400, "invalid chunk size");
}

TEST_F(ChunkedDecoderTest, RejectsOverflowingChunkSize) {
  const ChunkedLimits unlimited{.max_body_bytes = UINT64_MAX};
  ExpectRejected("10000000000000000\r\n", 400, "chunk size too long", unlimited);
  ExpectRejected("00000000000000001\r\n", 400, "chunk size too long", unlimited);
  // 16 digits fit in 64 bits.
  EXPECT_EQ(AllAtOnce("FFFFFFFFFFFFFFFF\r\nabc", unlimited).status, ChunkedStatus::kNeedMore);
}

TEST_F(ChunkedDecoderTest, RejectsBodyOverLimitWith413) {
  const ChunkedLimits limits{.max_body_bytes = 10};
  EXPECT_EQ(AllAtOnce("a\r\n0123456789\r\n0\r\n\r\n", limits).status, ChunkedStatus::kDone);
  // Refused at the size line, before the data arrives.
  ExpectRejected("b\r\n", 413, "body too large", limits);
  ExpectRejected("5\r\n01234\r\n6\r\n", 413, "body too large", limits);
  ExpectRejected("FFFFFFFFFFFFFFFF\r\n", 413, "body too large");
  ChunkedDecoder decoder(limits);
  std::vector<std::span<const uint8_t>> data;
  ASSERT_TRUE(decoder.Decode(Bytes("b;x\r\n"), &data).error());
  EXPECT_EQ(decoder.counters().body_too_large, 1u);
}

TEST_F(ChunkedDecoderTest, RejectsWhitespaceAfterSizeWithoutExtension) {
  ExpectRejected("5 \r\nhello\r\n", 400, "invalid chunk size line");
  ExpectRejected("5\t\r\nhello\r\n", 400, "invalid chunk size line");
  ExpectRejected("5 x\r\nhello\r\n", 400, "invalid chunk size line");
}

TEST_F(ChunkedDecoderTest, RejectsControlCharactersInExtensions) {
  ExpectRejected("5;a=\x01\r\nhello\r\n", 400, "chunk extension");
  ExpectRejected(std::string("5;a=\0\r\nhello\r\n", 13), 400, "chunk extension");
  ExpectRejected("5;a\nb\r\nhello\r\n", 400, "chunk extension");
}

TEST_F(ChunkedDecoderTest, RejectsExtensionsOverTotalLimit) {
  const ChunkedLimits limits{.max_chunk_extension_bytes = 16};
  // ";1234567" is 8 bytes: two of them are exactly the limit.
  EXPECT_EQ(AllAtOnce("1;1234567\r\na\r\n1;1234567\r\nb\r\n0\r\n\r\n", limits).status,
            ChunkedStatus::kDone);
  ExpectRejected("1;12345678\r\na\r\n1;12345678\r\nb\r\n", 400, "chunk extensions too long",
                 limits);
  ChunkedDecoder decoder(limits);
  std::vector<std::span<const uint8_t>> data;
  ASSERT_TRUE(decoder.Decode(Bytes("1;" + std::string(20, 'x')), &data).error());
  EXPECT_EQ(decoder.counters().extensions_too_long, 1u);
}

TEST_F(ChunkedDecoderTest, RejectsBareLineEndingsInFraming) {
  ExpectRejected("5\nhello\r\n", 400, "invalid chunk size");
  ExpectRejected("5\rhello\r\n", 400, "bare CR");
  ExpectRejected("5;x\rhello\r\n", 400, "bare CR");
  ExpectRejected("0\r\n\n", 400, "bare LF");
  ExpectRejected("0\r\nT: v\n\r\n", 400, "bare LF");
  ExpectRejected("0\r\nT: v\rx\r\n\r\n", 400, "bare CR");
  ExpectRejected("0\r\n\rx", 400, "bare CR");
}

TEST_F(ChunkedDecoderTest, RejectsDataNotFollowedByCrlf) {
  ExpectRejected("5\r\nhelloX\r\n", 400, "not followed by CRLF");
  ExpectRejected("5\r\nhello\rX", 400, "not followed by CRLF");
  ExpectRejected("5\r\nhello\n", 400, "not followed by CRLF");
  // One byte more than the size said.
  ExpectRejected("5\r\nhello!\r\n0\r\n\r\n", 400, "not followed by CRLF");
}

TEST_F(ChunkedDecoderTest, RejectsMalformedTrailers) {
  ExpectRejected("0\r\nNoColon\r\n\r\n", 400, "colon");
  ExpectRejected("0\r\nT : v\r\n\r\n", 400, "whitespace between field name and colon");
  ExpectRejected("0\r\nT: v\r\n folded\r\n\r\n", 400, "obs-fold");
  ExpectRejected("0\r\nT: a\x01\r\n\r\n", 400, "invalid character in field value");
}

TEST_F(ChunkedDecoderTest, RejectsTrailersOverLimitsWith431) {
  const ChunkedLimits limits{.max_trailer_bytes = 32, .max_trailer_count = 2};
  EXPECT_EQ(AllAtOnce("0\r\nA: 1\r\nB: 2\r\n\r\n", limits).status, ChunkedStatus::kDone);
  ExpectRejected("0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", 431, "too many trailer fields", limits);
  ExpectRejected("0\r\nA: " + std::string(40, 'v') + "\r\n\r\n", 431, "trailer section too large",
                 limits);
  // An endless trailer line is cut at the limit.
  ExpectRejected("0\r\nA: " + std::string(100, 'v'), 431, "trailer section too large", limits);
}

}  // namespace
}  // namespace sluice::http1
