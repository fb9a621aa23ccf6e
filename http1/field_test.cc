#include "http1/field.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace sluice::http1 {
namespace {

TEST(Field, ParsesFieldLine) {
  Header h;
  EXPECT_EQ(ParseFieldLine("Content-Type:  text/html; charset=utf-8 \t", &h), "");
  EXPECT_EQ(h.name, "Content-Type");
  EXPECT_EQ(h.value, "text/html; charset=utf-8");
  EXPECT_EQ(ParseFieldLine("X:", &h), "");
  EXPECT_EQ(h.value, "");
  EXPECT_EQ(ParseFieldLine("!#$%&'*+-.^_`|~09azAZ: v", &h), "");
}

TEST(Field, RejectsMalformedFieldLines) {
  Header h;
  EXPECT_EQ(ParseFieldLine("", &h), "empty field line");
  EXPECT_EQ(ParseFieldLine(" X: v", &h), "obs-fold (line folding) in field section");
  EXPECT_EQ(ParseFieldLine("X : v", &h), "whitespace between field name and colon");
  EXPECT_EQ(ParseFieldLine(": v", &h), "empty field name");
  EXPECT_EQ(ParseFieldLine("X", &h), "field line without a colon");
  EXPECT_EQ(ParseFieldLine("X(: v", &h), "invalid character in field name");
  EXPECT_EQ(ParseFieldLine("X: a\rb", &h), "bare CR in field value");
  EXPECT_EQ(ParseFieldLine(std::string_view("X: a\0b", 6), &h), "invalid character in field value");
  EXPECT_EQ(ParseFieldLine("X: a\nb", &h), "invalid character in field value");
  EXPECT_EQ(ParseFieldLine("X: a\x7f", &h), "invalid character in field value");
}

TEST(Field, ClassifiesBytes) {
  EXPECT_TRUE(IsTokenChar('a'));
  EXPECT_TRUE(IsTokenChar('~'));
  EXPECT_FALSE(IsTokenChar(':'));
  EXPECT_FALSE(IsTokenChar(' '));
  EXPECT_FALSE(IsTokenChar(0x80));
  EXPECT_TRUE(IsFieldValueChar('\t'));
  EXPECT_TRUE(IsFieldValueChar(0x80));
  EXPECT_FALSE(IsFieldValueChar('\r'));
  EXPECT_FALSE(IsFieldValueChar(0x7f));
  EXPECT_FALSE(IsFieldValueChar(0));
  EXPECT_TRUE(IsTargetChar('/'));
  EXPECT_FALSE(IsTargetChar('#'));
  EXPECT_FALSE(IsTargetChar(' '));
  EXPECT_FALSE(IsTargetChar(0xc3));
  EXPECT_TRUE(IsToken("chunked"));
  EXPECT_FALSE(IsToken(""));
  EXPECT_FALSE(IsToken("a b"));
}

TEST(Field, FindsInvalidBytesAtEveryPosition) {
  // The word-at-a-time scan agrees with the byte table for every byte at every offset.
  for (int c = 0; c < 256; ++c) {
    for (size_t len = 1; len <= 20; ++len) {
      for (size_t pos = 0; pos < len; ++pos) {
        std::string s(len, 'a');
        s[pos] = static_cast<char>(c);
        const size_t value_want = IsFieldValueChar(static_cast<uint8_t>(c)) ? len : pos;
        ASSERT_EQ(FindInvalidFieldValueChar(s), value_want) << c << " at " << pos << "/" << len;
        const size_t target_want = IsTargetChar(static_cast<uint8_t>(c)) ? len : pos;
        ASSERT_EQ(FindInvalidTargetChar(s), target_want) << c << " at " << pos << "/" << len;
      }
    }
  }
  EXPECT_EQ(FindInvalidFieldValueChar(""), 0u);
  EXPECT_EQ(FindInvalidFieldValueChar("a\tb\x80"
                                      "c d\x7f"),
            7u);
  EXPECT_EQ(FindInvalidTargetChar("/abc\xff"
                                  "defgh"),
            4u);
}

TEST(Field, SplitsLists) {
  std::string_view list = " gzip , ,chunked\t,";
  EXPECT_EQ(NextListElement(&list), "gzip");
  EXPECT_EQ(NextListElement(&list), "");
  EXPECT_EQ(NextListElement(&list), "chunked");
  EXPECT_EQ(list, "");
  EXPECT_EQ(TrimOws(" \t x y\t "), "x y");
}

}  // namespace
}  // namespace sluice::http1
