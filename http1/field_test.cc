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
  // A valid byte the word test flags (HTAB) before another byte: the scan goes on past it.
  for (int c = 0; c < 256; ++c) {
    for (size_t len = 2; len <= 20; ++len) {
      for (size_t tab = 0; tab + 1 < len; ++tab) {
        for (size_t pos = tab + 1; pos < len; ++pos) {
          std::string s(len, 'a');
          s[tab] = '\t';
          s[pos] = static_cast<char>(c);
          const size_t want = IsFieldValueChar(static_cast<uint8_t>(c)) ? len : pos;
          ASSERT_EQ(FindInvalidFieldValueChar(s), want) << c << " at " << pos << "/" << len;
        }
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

TEST(Field, FindsTheQueryWhileCheckingATarget) {
  size_t question_mark = 0;
  EXPECT_EQ(FindInvalidTargetChar("/plaintext", &question_mark), 10u);
  EXPECT_EQ(question_mark, 10u);
  EXPECT_EQ(FindInvalidTargetChar("/search?q=a?b&n=1", &question_mark), 17u);
  EXPECT_EQ(question_mark, 7u);
  EXPECT_EQ(FindInvalidTargetChar("?", &question_mark), 1u);
  EXPECT_EQ(question_mark, 0u);
  // A bad byte after the '?' is still found; one before it hides the '?'.
  EXPECT_EQ(FindInvalidTargetChar("/a?b#c", &question_mark), 4u);
  EXPECT_EQ(question_mark, 2u);
  EXPECT_EQ(FindInvalidTargetChar("/a#b?c", &question_mark), 2u);
  EXPECT_EQ(question_mark, 6u);
  // Against the plain scan and find('?'), for every byte and a '?' at every offset.
  for (int c = 0; c < 256; ++c) {
    for (size_t len = 1; len <= 20; ++len) {
      for (size_t pos = 0; pos < len; ++pos) {
        for (size_t q = 0; q <= len; ++q) {
          std::string s(len, 'a');
          if (q < len) s[q] = '?';
          s[pos] = static_cast<char>(c);
          const size_t bad = FindInvalidTargetChar(s);
          const size_t first_q = s.substr(0, bad).find('?');
          ASSERT_EQ(FindInvalidTargetChar(s, &question_mark), bad) << c << " at " << pos;
          ASSERT_EQ(question_mark, first_q == std::string::npos ? s.size() : first_q)
              << c << " at " << pos << ", '?' at " << q << "/" << len;
        }
      }
    }
  }
}

TEST(Field, ParsesAFieldLineUpToItsCrlfAsParseFieldLineParsesTheLine) {
  // Each line followed by CRLF and more bytes: the same outcome as ParseFieldLine on the line,
  // and the line's size with its CRLF.
  const std::string_view lines[] = {
      "Content-Type:  text/html; charset=utf-8 \t",
      "X:",
      "Host: 127.0.0.1:8080",
      "!#$%&'*+-.^_`|~09azAZ: v",
      "X-Long: 0123456789abcdef0123456789abcdef",
      "",
      " X: v",
      "X : v",
      ": v",
      "X",
      "X(: v",
      "X: a\rb",
      std::string_view("X: a\0b", 6),
      "X: a\x7f",
      "X\r",
      "X: a\r",
      "\x80: v",
  };
  for (std::string_view line : lines) {
    Header want;
    const std::string_view want_reason = ParseFieldLine(line, &want);
    for (std::string_view after : {"\r\n", "Next: x\r\n\r\n"}) {
      const std::string input = std::string(line) + "\r\n" + std::string(after);
      Header got;
      size_t line_size = 0;
      ASSERT_EQ(ParseFieldLineUntilCrlf(input, &got, &line_size), want_reason) << line;
      if (want_reason.empty()) {
        EXPECT_EQ(got, want) << line;
        EXPECT_EQ(line_size, line.size() + 2) << line;
      }
    }
  }
}

// The bytes whose classes differ, for the tests below that cover every length and position.
constexpr unsigned char kByteKinds[] = {0x00, '\t', '\n', '\r', ' ',  '!',  '#',
                                        '?',  ':',  'a',  0x7e, 0x7f, 0x80, 0xff};

TEST(Field, FindsTargetEndAndQueryInLongTargets) {
  // Long enough for the 16-byte and the 8-byte steps and the byte tail, in every mix.
  for (unsigned char c : kByteKinds) {
    for (size_t len = 1; len <= 48; ++len) {
      for (size_t pos = 0; pos < len; ++pos) {
        for (size_t q : {size_t{0}, size_t{7}, size_t{15}, size_t{16}, size_t{31}, len}) {
          if (q > len) continue;
          std::string s(len, 'a');
          if (q < len) s[q] = '?';
          s[pos] = static_cast<char>(c);
          size_t want = 0;
          while (want < s.size() && IsTargetChar(static_cast<uint8_t>(s[want]))) ++want;
          const size_t first_q = s.substr(0, want).find('?');
          size_t question_mark = 0;
          ASSERT_EQ(FindInvalidTargetChar(s, &question_mark), want)
              << int{c} << " at " << pos << "/" << len;
          ASSERT_EQ(question_mark, first_q == std::string::npos ? s.size() : first_q)
              << int{c} << " at " << pos << ", '?' at " << q << "/" << len;
        }
      }
    }
  }
}

TEST(Field, FindsTheEndOfLongFieldValuesAsParseFieldLine) {
  // Values long enough for the 16-byte and the 8-byte steps and the byte tail; a byte of each
  // kind at every position, alone and after an HTAB (valid, but flagged by the wide steps).
  for (unsigned char c : kByteKinds) {
    for (size_t len = 1; len <= 48; ++len) {
      for (size_t pos = 0; pos < len; ++pos) {
        for (size_t tab : {len, size_t{0}, pos / 2}) {
          std::string value(len, 'v');
          if (tab < pos) value[tab] = '\t';
          value[pos] = static_cast<char>(c);
          const std::string line = "Name: " + value;
          Header want;
          const std::string_view want_reason = ParseFieldLine(line, &want);
          for (std::string_view after : {"", "Next: x\r\n\r\n"}) {
            const std::string input = line + "\r\n" + std::string(after);
            Header got;
            size_t line_size = 0;
            const std::string_view got_reason = ParseFieldLineUntilCrlf(input, &got, &line_size);
            if (want_reason.empty()) {
              ASSERT_EQ(got_reason, "") << int{c} << " at " << pos << "/" << len;
              ASSERT_EQ(got, want) << int{c} << " at " << pos << "/" << len;
              ASSERT_EQ(line_size, line.size() + 2);
            } else if (c == '\n') {
              // ParseFieldLine, given the line alone, calls an LF a bad value byte; before a
              // CRLF it is a bare LF line ending.
              ASSERT_EQ(got_reason, "bare LF line ending") << pos << "/" << len;
            } else {
              ASSERT_EQ(got_reason, want_reason) << int{c} << " at " << pos << "/" << len;
            }
          }
        }
      }
    }
  }
}

TEST(Field, RejectsAFieldLineWithoutCrlf) {
  Header h;
  size_t line_size = 0;
  EXPECT_EQ(ParseFieldLineUntilCrlf("", &h, &line_size), "malformed header section");
  EXPECT_EQ(ParseFieldLineUntilCrlf("X: v", &h, &line_size), "malformed header section");
  EXPECT_EQ(ParseFieldLineUntilCrlf("X", &h, &line_size), "malformed header section");
  EXPECT_EQ(ParseFieldLineUntilCrlf("X: v\r", &h, &line_size), "bare CR in field value");
  EXPECT_EQ(ParseFieldLineUntilCrlf("X: v\n\r\n", &h, &line_size), "bare LF line ending");
  EXPECT_EQ(ParseFieldLineUntilCrlf("X\n: v\r\n", &h, &line_size), "bare LF line ending");
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
