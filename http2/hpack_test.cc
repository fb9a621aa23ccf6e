#include "http2/hpack.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::http2 {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using std::string_literals::operator""s;

using Fields = std::vector<std::pair<std::string, std::string>>;

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string Encode(HpackEncoder& encoder, const std::vector<HeaderField>& fields) {
  std::string block;
  const Status s = encoder.Encode(fields, &block);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return block;
}

// Decodes `fragment` into *fields (appending).
Status DecodeFragment(HpackDecoder& decoder, std::string_view fragment, bool final,
                      Fields* fields) {
  return decoder.Decode(Bytes(fragment), final,
                        [fields](std::string_view name, std::string_view value) {
                          fields->emplace_back(std::string(name), std::string(value));
                        });
}

// Decodes one whole block; the fields, or an empty list if decoding failed (also a failure).
Fields DecodeBlock(HpackDecoder& decoder, std::string_view block) {
  Fields fields;
  const Status s = DecodeFragment(decoder, block, true, &fields);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return fields;
}

Fields ToPairs(const std::vector<HeaderField>& fields) {
  Fields out;
  for (const HeaderField& f : fields) out.emplace_back(std::string(f.name), std::string(f.value));
  return out;
}

// A request and a response with fields from the static table, ones that get indexed, Huffman-
// friendly and -hostile values, and a secret.
const std::vector<HeaderField>& Request() {
  static const std::vector<HeaderField> fields = {
      {":method", "GET"},
      {":scheme", "https"},
      {":path", "/index.html?q=1"},
      {":authority", "www.example.com"},
      {"user-agent", "sluice-test/1.0"},
      {"accept", "*/*"},
      {"x-binary", "\x01\x7f\xff\xfe"},
      {"authorization", "Bearer secret-token", /*never_index=*/true},
  };
  return fields;
}

// --- round trips ---

TEST(Hpack, RoundTripsRequestFields) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, Request())), ToPairs(Request()));
}

TEST(Hpack, RoundTripsRepeatedBlocksThroughDynamicTable) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::vector<HeaderField> fields = {{":status", "200"},
                                           {"content-type", "application/json"},
                                           {"x-request-id", "0123456789abcdef"}};
  const std::string first = Encode(encoder, fields);
  const std::string second = Encode(encoder, fields);
  // The second block refers to the entries the first added.
  EXPECT_LT(second.size(), first.size());
  EXPECT_EQ(DecodeBlock(decoder, first), ToPairs(fields));
  EXPECT_EQ(DecodeBlock(decoder, second), ToPairs(fields));
}

TEST(Hpack, RoundTripsEmptyBlock) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::string block = Encode(encoder, {});
  EXPECT_THAT(block, IsEmpty());
  EXPECT_THAT(DecodeBlock(decoder, block), IsEmpty());
}

TEST(Hpack, RoundTripsEmptyValues) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::vector<HeaderField> fields = {{"x-empty", ""}, {"x-after", "v"}};
  EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, fields)), ToPairs(fields));
}

TEST(Hpack, EncodesNeverIndexedFieldAsNeverIndexedLiteral) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::vector<HeaderField> fields = {{"x-secret", "hunter2", /*never_index=*/true}};
  const std::string first = Encode(encoder, fields);
  // RFC 7541 §6.2.3: 0001xxxx, here with a new name (index 0).
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(static_cast<uint8_t>(first[0]), 0x10);
  // Not in the dynamic table: the second block spells it out again.
  const std::string second = Encode(encoder, fields);
  EXPECT_EQ(second, first);
  EXPECT_EQ(DecodeBlock(decoder, first), ToPairs(fields));
  EXPECT_EQ(DecodeBlock(decoder, second), ToPairs(fields));
}

TEST(Hpack, IndexesFieldWithoutNeverIndex) {
  HpackEncoder encoder;
  const std::vector<HeaderField> fields = {{"x-secret", "hunter2"}};
  const std::string first = Encode(encoder, fields);
  EXPECT_EQ(static_cast<uint8_t>(first[0]), 0x40);  // literal with incremental indexing
  EXPECT_EQ(Encode(encoder, fields), "\xbe"s);      // dynamic table entry 62
}

TEST(Hpack, RoundTripsLargeValues) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  std::string random_bytes(60000, '\0');
  uint32_t x = 12345;
  for (char& c : random_bytes) {
    x = x * 1103515245 + 12345;
    c = static_cast<char>(x >> 24);
  }
  const std::string cookie(16384, 'c');
  const std::vector<HeaderField> fields = {
      {"x-random", random_bytes}, {"cookie", cookie}, {"x-small", "s"}};
  EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, fields)), ToPairs(fields));
  // Larger than the table: never indexed, and the table still works afterwards.
  EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, fields)), ToPairs(fields));
}

TEST(Hpack, RoundTripsManyFields) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  std::vector<std::string> storage;
  for (int i = 0; i < 1000; ++i) storage.push_back("value-" + std::to_string(i * 7919));
  std::vector<HeaderField> fields;
  for (int i = 0; i < 1000; ++i) {
    fields.push_back({i % 2 == 0 ? "x-even" : "x-odd", storage[i], /*never_index=*/i % 3 == 0});
  }
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, fields)), ToPairs(fields));
  }
}

TEST(Hpack, EncodeAppendsToOutput) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  std::string out = "prefix";
  ASSERT_TRUE(encoder.Encode(Request(), &out).ok());
  EXPECT_EQ(out.substr(0, 6), "prefix");
  EXPECT_EQ(DecodeBlock(decoder, out.substr(6)), ToPairs(Request()));
}

// --- fragments ---

TEST(HpackDecoder, GivesSameFieldsForEverySplitIntoTwoFragments) {
  HpackEncoder encoder;
  const std::string first = Encode(encoder, Request());
  const std::string second = Encode(encoder, Request());  // uses the dynamic table
  for (const std::string* block : {&first, &second}) {
    for (size_t split = 0; split <= block->size(); ++split) {
      HpackDecoder decoder;
      if (block == &second) {
        ASSERT_EQ(DecodeBlock(decoder, first), ToPairs(Request()));
      }
      Fields fields;
      ASSERT_TRUE(DecodeFragment(decoder, block->substr(0, split), false, &fields).ok());
      const Status s = DecodeFragment(decoder, block->substr(split), true, &fields);
      ASSERT_TRUE(s.ok()) << "split at " << split << ": " << s.ToString();
      EXPECT_EQ(fields, ToPairs(Request())) << "split at " << split;
    }
  }
}

TEST(HpackDecoder, GivesSameFieldsFedOneByteAtATime) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  for (int round = 0; round < 2; ++round) {
    const std::string block = Encode(encoder, Request());
    Fields fields;
    for (const char c : block) {
      ASSERT_TRUE(DecodeFragment(decoder, std::string_view(&c, 1), false, &fields).ok());
    }
    ASSERT_TRUE(DecodeFragment(decoder, "", true, &fields).ok());
    EXPECT_EQ(fields, ToPairs(Request()));
  }
}

TEST(HpackDecoder, AcceptsEmptyNonFinalFragments) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::string block = Encode(encoder, Request());
  Fields fields;
  ASSERT_TRUE(DecodeFragment(decoder, "", false, &fields).ok());
  ASSERT_TRUE(DecodeFragment(decoder, block, false, &fields).ok());
  ASSERT_TRUE(DecodeFragment(decoder, "", false, &fields).ok());
  ASSERT_TRUE(DecodeFragment(decoder, "", true, &fields).ok());
  EXPECT_EQ(fields, ToPairs(Request()));
}

// --- RFC 7541 Appendix C.3: requests without Huffman coding, one dynamic table ---

TEST(HpackDecoder, DecodesRfc7541RequestExamples) {
  HpackDecoder decoder;
  EXPECT_THAT(DecodeBlock(decoder, "\x82\x86\x84\x41\x0fwww.example.com"),
              ElementsAre(Pair(":method", "GET"), Pair(":scheme", "http"), Pair(":path", "/"),
                          Pair(":authority", "www.example.com")));
  EXPECT_THAT(
      DecodeBlock(decoder, "\x82\x86\x84\xbe\x58\x08no-cache"),
      ElementsAre(Pair(":method", "GET"), Pair(":scheme", "http"), Pair(":path", "/"),
                  Pair(":authority", "www.example.com"), Pair("cache-control", "no-cache")));
  EXPECT_THAT(
      DecodeBlock(decoder,
                  "\x82\x87\x85\xbf\x40\x0a"
                  "custom-key\x0c"
                  "custom-value"),
      ElementsAre(Pair(":method", "GET"), Pair(":scheme", "https"), Pair(":path", "/index.html"),
                  Pair(":authority", "www.example.com"), Pair("custom-key", "custom-value")));
}

// --- dynamic table size ---

TEST(HpackDecoder, AcceptsTableSizeUpdateUpToItsMaximum) {
  HpackDecoder decoder(4096);
  // 001 11111, then 4096 - 31 = 4065 in 7-bit groups: 0xe1 0x1f.
  EXPECT_THAT(DecodeBlock(decoder, "\x3f\xe1\x1f\x82"), ElementsAre(Pair(":method", "GET")));
  EXPECT_EQ(decoder.table_size_updates(), 1u);
}

TEST(HpackDecoder, RejectsTableSizeUpdateAboveItsMaximum) {
  HpackDecoder decoder(4096);
  Fields fields;
  const Status s = DecodeFragment(decoder, "\x3f\xe2\x1f\x82", true, &fields);  // 4097
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("NGHTTP2_ERR_HEADER_COMP"));
  EXPECT_THAT(fields, IsEmpty());
}

TEST(HpackDecoder, RejectsHugeTableSizeUpdateOfLargerDecoder) {
  HpackDecoder decoder(65536);
  Fields fields;
  // 2^32 - 1 does not fit nghttp2's integer decoding either.
  EXPECT_FALSE(DecodeFragment(decoder, "\x3f\xe0\xff\xff\xff\x0f", true, &fields).ok());
}

TEST(HpackDecoder, RejectsTableSizeUpdateAfterAField) {
  HpackDecoder decoder;
  Fields fields;
  EXPECT_EQ(DecodeFragment(decoder, "\x82\x20", true, &fields).code(),
            StatusCode::kInvalidArgument);
}

TEST(HpackDecoder, CountsEachTableSizeUpdateAtBlockStart) {
  HpackDecoder decoder;
  // Two updates (RFC 7541 §4.2 allows a minimum, then the final size): 0, then 4096.
  EXPECT_THAT(DecodeBlock(decoder, "\x20\x3f\xe1\x1f\x82"), ElementsAre(Pair(":method", "GET")));
  EXPECT_EQ(decoder.table_size_updates(), 2u);
  EXPECT_THAT(DecodeBlock(decoder, "\x82"), ElementsAre(Pair(":method", "GET")));
  EXPECT_EQ(decoder.table_size_updates(), 2u);
  EXPECT_THAT(DecodeBlock(decoder, "\x21"), IsEmpty());
  EXPECT_EQ(decoder.table_size_updates(), 3u);
}

TEST(HpackDecoder, CountsTableSizeUpdateSplitAcrossFragments) {
  HpackDecoder decoder;
  Fields fields;
  ASSERT_TRUE(DecodeFragment(decoder, "\x3f", false, &fields).ok());
  ASSERT_TRUE(DecodeFragment(decoder, "\xe1", false, &fields).ok());
  // 0x3f here continues the integer; it is not a second update.
  ASSERT_TRUE(DecodeFragment(decoder, "\x1f", false, &fields).ok());
  ASSERT_TRUE(DecodeFragment(decoder, "\x82", true, &fields).ok());
  EXPECT_EQ(decoder.table_size_updates(), 1u);
  EXPECT_THAT(fields, ElementsAre(Pair(":method", "GET")));
}

TEST(HpackDecoder, DoesNotCountSizeUpdatePatternInsideFields) {
  HpackDecoder decoder;
  // A literal whose name and value bytes look like size updates (0x3f '?', 0x20 ' '), split so
  // that the second fragment starts with one.
  Fields fields;
  ASSERT_TRUE(DecodeFragment(decoder, "\x40\x02", false, &fields).ok());
  ASSERT_TRUE(DecodeFragment(decoder, "? \x01 ", true, &fields).ok());
  EXPECT_THAT(fields, ElementsAre(Pair("? ", " ")));
  EXPECT_EQ(decoder.table_size_updates(), 0u);
}

TEST(Hpack, RoundTripsAfterPeerSetsTableSizeToZero) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, Request())), ToPairs(Request()));
  ASSERT_TRUE(encoder.SetPeerTableSize(0).ok());
  const std::string block = Encode(encoder, Request());
  ASSERT_FALSE(block.empty());
  EXPECT_EQ(static_cast<uint8_t>(block[0]), 0x20);  // size update to 0 first
  EXPECT_EQ(DecodeBlock(decoder, block), ToPairs(Request()));
  EXPECT_EQ(decoder.table_size_updates(), 1u);
  // Nothing is indexed any more, and that still round-trips.
  EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, Request())), ToPairs(Request()));
  EXPECT_EQ(decoder.table_size_updates(), 1u);
}

TEST(Hpack, RoundTripsAfterPeerShrinksThenGrowsTable) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, Request())), ToPairs(Request()));
  ASSERT_TRUE(encoder.SetPeerTableSize(64).ok());
  ASSERT_TRUE(encoder.SetPeerTableSize(4096).ok());
  // Both sizes are signalled (the minimum, then the final one) so the decoder evicts as well.
  EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, Request())), ToPairs(Request()));
  EXPECT_EQ(decoder.table_size_updates(), 2u);
  EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, Request())), ToPairs(Request()));
}

TEST(Hpack, CapsPeerTableSizeAtEncoderMaximum) {
  HpackEncoder encoder(4096);
  HpackDecoder decoder(4096);
  ASSERT_TRUE(encoder.SetPeerTableSize(1 << 20).ok());
  // An update above 4096 would be a COMPRESSION_ERROR at the decoder.
  EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, Request())), ToPairs(Request()));
  EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, Request())), ToPairs(Request()));
}

TEST(Hpack, RoundTripsWithZeroSizedTablesOnBothSides) {
  HpackEncoder encoder(0);
  HpackDecoder decoder(0);
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, Request())), ToPairs(Request()));
  }
}

// nghttp2: a decoder whose maximum is below the protocol's initial 4096 wants the peer's next block
// to open with a size update (RFC 7541 §4.2) and refuses one that does not.
TEST(HpackDecoder, RequiresSizeUpdateFirstWhenMaximumIsBelowDefault) {
  HpackDecoder strict(256);
  Fields fields;
  EXPECT_EQ(DecodeFragment(strict, "\x82", true, &fields).code(), StatusCode::kInvalidArgument);
  HpackDecoder decoder(256);
  EXPECT_THAT(DecodeBlock(decoder, "\x3f\xe1\x01\x82"), ElementsAre(Pair(":method", "GET")));
}

// --- malformed input ---

void ExpectRejected(std::string_view block) {
  HpackDecoder decoder;
  Fields fields;
  const Status s = DecodeFragment(decoder, block, true, &fields);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("NGHTTP2_ERR_HEADER_COMP"));
}

TEST(HpackDecoder, RejectsIndexZero) { ExpectRejected("\x80"); }

TEST(HpackDecoder, RejectsIndexBeyondTables) {
  ExpectRejected("\xbe");  // 62: the dynamic table is empty
}

TEST(HpackDecoder, RejectsTruncatedInteger) {
  ExpectRejected("\xff");
  ExpectRejected("\xff\x80\x80");
}

TEST(HpackDecoder, RejectsIntegerOverflow) { ExpectRejected("\xff\xff\xff\xff\xff\xff\xff\x7f"); }

TEST(HpackDecoder, RejectsTruncatedString) {
  ExpectRejected(
      "\x40\x05"
      "abc");
}

TEST(HpackDecoder, RejectsHuffmanPaddingOfZeros) {
  // Name "0" (5 bits 00000) padded with 000 instead of the EOS prefix 111.
  ExpectRejected("\x40\x81\x00\x01v"s);
}

TEST(HpackDecoder, RejectsHuffmanPaddingLongerThanSevenBits) {
  ExpectRejected("\x40\x82\x07\xff\x01v"s);  // "0" then a whole byte of ones
}

TEST(HpackDecoder, RejectsHuffmanEosSymbol) {
  // EOS is 30 ones: four bytes of ones contain it.
  ExpectRejected("\x40\x84\xff\xff\xff\xff\x01v"s);
}

TEST(HpackDecoder, RejectsStringLongerThanNghttp2Limit) {
  // nghttp2 refuses names and values over 64 KiB however large the frames allow the block to be.
  HpackEncoder encoder;
  const std::string value(70000, '\x01');  // no Huffman gain: literal length 70000
  ExpectRejected(Encode(encoder, {{"x-big", value}}));
}

TEST(HpackDecoder, StaysFailedAfterError) {
  HpackDecoder decoder;
  Fields fields;
  ASSERT_FALSE(DecodeFragment(decoder, "\x80", true, &fields).ok());
  HpackEncoder encoder;
  const Status s = DecodeFragment(decoder, Encode(encoder, Request()), true, &fields);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(fields, IsEmpty());
}

TEST(HpackDecoder, EmitsFieldsBeforeTheErrorThenStops) {
  HpackDecoder decoder;
  Fields fields;
  EXPECT_FALSE(DecodeFragment(decoder, "\x82\x84\x80\x86", true, &fields).ok());
  EXPECT_THAT(fields, ElementsAre(Pair(":method", "GET"), Pair(":path", "/")));
}

// --- kept blocks: the same fields (encoder) or bytes (decoder) again, without nghttp2 ---

TEST(HpackEncoder, ReusesTheBlockOfRepeatedFieldsWhileTheTableStaysTheSame) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::vector<HeaderField> fields = {{":status", "200"},
                                           {"content-type", "text/plain"},
                                           {"content-length", "13"}};
  const std::string first = Encode(encoder, fields);   // adds content-type to the table
  const std::string second = Encode(encoder, fields);  // refers to it: the table stays
  const std::string third = Encode(encoder, fields);
  EXPECT_EQ(encoder.reused_blocks(), 1u);
  EXPECT_EQ(third, second);
  for (const std::string& block : {first, second, third}) {
    EXPECT_EQ(DecodeBlock(decoder, block), ToPairs(fields));
  }
}

TEST(HpackEncoder, EncodesAfreshOnceAnotherBlockChangedTheTable) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::vector<HeaderField> a = {{":status", "200"}, {"content-type", "text/plain"}};
  const std::vector<HeaderField> b = {{":status", "200"}, {"x-new", "1"}, {"x-other", "2"}};
  // a, a (kept), b (adds two entries: a's indexes move), a again, a: every block decodes to its
  // fields, so the kept block was not reused across the change.
  for (const auto* fields : {&a, &a, &b, &a, &a, &b, &b, &a}) {
    EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, *fields)), ToPairs(*fields));
  }
  EXPECT_GE(encoder.reused_blocks(), 2u);
}

TEST(HpackEncoder, DoesNotReuseForDifferentValuesOrNeverIndex) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::vector<HeaderField> plain = {{"x-a", "1"}, {"x-b", "2"}};
  const std::vector<HeaderField> secret = {{"x-a", "1"}, {"x-b", "2", /*never_index=*/true}};
  const std::vector<HeaderField> other = {{"x-a", "1"}, {"x-b", "3"}};
  const std::vector<HeaderField> fewer = {{"x-a", "1"}};
  for (const auto* fields : {&plain, &plain, &secret, &other, &fewer, &plain}) {
    const std::string block = Encode(encoder, *fields);
    EXPECT_EQ(DecodeBlock(decoder, block), ToPairs(*fields));
  }
}

// The kept block is reused only for the very same bytes: a name or value of any length that
// differs from the kept one in any single byte (at its start, in its middle, in its last word or
// its last two) is encoded afresh. Never-indexed fields leave the table unchanged, so each block
// is kept.
TEST(HpackEncoder, DoesNotReuseTheKeptBlockForAFieldThatDiffersInAnyOneByte) {
  for (size_t n = 1; n <= 24; ++n) {
    for (size_t at = 0; at < n; ++at) {
      for (const bool in_name : {false, true}) {
        HpackEncoder encoder;
        HpackDecoder decoder;
        const std::string base(n, 'a');
        std::string changed = base;
        changed[at] = 'b';
        // The varied string as the name (value "v") or as the value (name "x-v").
        auto field = [in_name](std::string_view varied) {
          return in_name ? HeaderField{varied, "v", true} : HeaderField{"x-v", varied, true};
        };
        const std::vector<HeaderField> kept = {{":status", "200"}, field(base)};
        const std::vector<HeaderField> other = {{":status", "200"}, field(changed)};
        EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, kept)), ToPairs(kept));
        EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, kept)), ToPairs(kept));
        ASSERT_EQ(encoder.reused_blocks(), 1u) << "n=" << n;
        EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, other)), ToPairs(other))
            << "n=" << n << " at=" << at << " in_name=" << in_name;
        EXPECT_EQ(encoder.reused_blocks(), 1u) << "n=" << n << " at=" << at;
      }
    }
  }
}

TEST(HpackEncoder, ForgetsTheKeptBlockWhenThePeerChangesTheTableSize) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::vector<HeaderField> fields = {{":status", "200"}, {"content-type", "text/plain"}};
  EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, fields)), ToPairs(fields));
  EXPECT_EQ(DecodeBlock(decoder, Encode(encoder, fields)), ToPairs(fields));
  ASSERT_TRUE(encoder.SetPeerTableSize(0).ok());
  const uint64_t reused = encoder.reused_blocks();
  const std::string after = Encode(encoder, fields);
  EXPECT_EQ(encoder.reused_blocks(), reused);
  EXPECT_EQ(static_cast<uint8_t>(after[0]) & 0xe0, 0x20) << "starts with a table size update";
  EXPECT_EQ(DecodeBlock(decoder, after), ToPairs(fields));
}

TEST(HpackDecoder, ReusesTheFieldsOfRepeatedBytesWhileTheTableStaysTheSame) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::string first = Encode(encoder, Request());
  const std::string again = Encode(encoder, Request());  // no new entries: the same bytes
  ASSERT_EQ(Encode(encoder, Request()), again);
  EXPECT_EQ(DecodeBlock(decoder, first), ToPairs(Request()));
  EXPECT_EQ(DecodeBlock(decoder, again), ToPairs(Request()));
  EXPECT_EQ(DecodeBlock(decoder, again), ToPairs(Request()));
  EXPECT_EQ(DecodeBlock(decoder, again), ToPairs(Request()));
  EXPECT_EQ(decoder.reused_blocks(), 2u);
}

TEST(HpackDecoder, SaysWhetherABlockWasReplayedFromTheKeptOne) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::string first = Encode(encoder, Request());
  const std::string again = Encode(encoder, Request());
  DecodeBlock(decoder, first);
  EXPECT_FALSE(decoder.replayed());
  EXPECT_FALSE(decoder.holds_kept_block());  // the first block added entries: not kept
  DecodeBlock(decoder, again);
  EXPECT_FALSE(decoder.replayed());
  EXPECT_TRUE(decoder.holds_kept_block());
  bool replayed_in_callback = false;
  ASSERT_TRUE(decoder
                  .Decode(Bytes(again), true,
                          [&](std::string_view, std::string_view) {
                            replayed_in_callback = decoder.replayed();
                          })
                  .ok());
  EXPECT_TRUE(replayed_in_callback);
  EXPECT_TRUE(decoder.replayed());
  DecodeBlock(decoder, "\x40\x03x-a\x01" "1"s);  // adds an entry: the kept block is dropped
  EXPECT_FALSE(decoder.replayed());
  EXPECT_FALSE(decoder.holds_kept_block());
}

TEST(HpackDecoder, ReplaysOnlyTheKeptBlockWholeAndLeavesAnythingElseToDecode) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::string first = Encode(encoder, Request());
  const std::string again = Encode(encoder, Request());
  EXPECT_FALSE(decoder.Replay(Bytes(first), true));  // nothing kept yet
  DecodeBlock(decoder, first);
  EXPECT_FALSE(decoder.Replay(Bytes(again), true));  // the first block is not kept (it indexed)
  DecodeBlock(decoder, again);
  EXPECT_FALSE(decoder.Replay(Bytes(again), false));  // not a whole block
  EXPECT_FALSE(decoder.Replay(Bytes(again).first(again.size() - 1), true));
  EXPECT_TRUE(decoder.Replay(Bytes(again), true));
  EXPECT_TRUE(decoder.replayed());
  EXPECT_EQ(decoder.reused_blocks(), 1u);
  // What was not replayed decodes as before, and a replay leaves the table as it was.
  EXPECT_EQ(DecodeBlock(decoder, again), ToPairs(Request()));
  EXPECT_EQ(decoder.reused_blocks(), 2u);
  EXPECT_THAT(DecodeBlock(decoder, "\x40\x03x-a\x01" "1"s), ElementsAre(Pair("x-a", "1")));
  EXPECT_FALSE(decoder.Replay(Bytes(again), true));  // the table changed: the kept block is gone
}

TEST(HpackDecoder, DecodesTheSameBytesAfreshAfterABlockChangedTheTable) {
  HpackDecoder decoder;
  // 0xbe: dynamic index 62, the newest entry. After "x-a: 1" is added it is x-a; after "x-b: 2"
  // it is x-b: the same byte means another field.
  EXPECT_THAT(DecodeBlock(decoder, "\x40\x03x-a\x01" "1"s), ElementsAre(Pair("x-a", "1")));
  EXPECT_THAT(DecodeBlock(decoder, "\xbe"), ElementsAre(Pair("x-a", "1")));
  EXPECT_THAT(DecodeBlock(decoder, "\xbe"), ElementsAre(Pair("x-a", "1")));
  EXPECT_THAT(DecodeBlock(decoder, "\x40\x03x-b\x01" "2"s), ElementsAre(Pair("x-b", "2")));
  EXPECT_THAT(DecodeBlock(decoder, "\xbe"), ElementsAre(Pair("x-b", "2")));
  // A literal without indexing leaves the table: the kept block stays good.
  EXPECT_THAT(DecodeBlock(decoder, "\x00\x03x-c\x01" "3"s), ElementsAre(Pair("x-c", "3")));
  EXPECT_THAT(DecodeBlock(decoder, "\xbe"), ElementsAre(Pair("x-b", "2")));
}

TEST(HpackDecoder, KeepsNothingFromABlockSplitOverFragments) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::string first = Encode(encoder, Request());
  const std::string again = Encode(encoder, Request());
  EXPECT_EQ(DecodeBlock(decoder, first), ToPairs(Request()));
  for (int i = 0; i < 3; ++i) {
    Fields fields;
    ASSERT_TRUE(DecodeFragment(decoder, again.substr(0, 3), false, &fields).ok());
    ASSERT_TRUE(DecodeFragment(decoder, again.substr(3), true, &fields).ok());
    EXPECT_EQ(fields, ToPairs(Request()));
  }
  EXPECT_EQ(decoder.reused_blocks(), 0u);
}

TEST(HpackDecoder, AKeptBlockDoesNotHideAnEarlierFailure) {
  HpackEncoder encoder;
  HpackDecoder decoder;
  const std::string first = Encode(encoder, Request());
  const std::string again = Encode(encoder, Request());
  EXPECT_EQ(DecodeBlock(decoder, first), ToPairs(Request()));
  EXPECT_EQ(DecodeBlock(decoder, again), ToPairs(Request()));
  Fields fields;
  ASSERT_FALSE(DecodeFragment(decoder, "\x80", true, &fields).ok());
  EXPECT_FALSE(DecodeFragment(decoder, again, true, &fields).ok());
}

}  // namespace
}  // namespace sluice::http2
