#include "core/ascii.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice {
namespace {

TEST(Ascii, LowersLettersOnly) {
  EXPECT_EQ(AsciiLower('A'), 'a');
  EXPECT_EQ(AsciiLower('Z'), 'z');
  EXPECT_EQ(AsciiLower('a'), 'a');
  // The neighbours of the range stay: '@' (0x40) and '[' (0x5b); so do bytes past ASCII.
  EXPECT_EQ(AsciiLower('@'), '@');
  EXPECT_EQ(AsciiLower('['), '[');
  EXPECT_EQ(AsciiLower('\xc4'), '\xc4');
}

TEST(Ascii, ComparesWithALowercaseLiteral) {
  EXPECT_TRUE(EqualsLowercase("Content-Length", "content-length"));
  EXPECT_TRUE(EqualsLowercase("HOST", "host"));
  EXPECT_FALSE(EqualsLowercase("hosts", "host"));
  EXPECT_FALSE(EqualsLowercase("h0st", "host"));
  // Only letters fold: '\r' (0x0d) is not '-' (0x2d), and '^' (0x5e) is not '~' (0x7e).
  EXPECT_FALSE(EqualsLowercase("content\rlength", "content-length"));
  EXPECT_FALSE(EqualsLowercase("a^b", "a~b"));
  EXPECT_TRUE(EqualsLowercase("", ""));
}

TEST(Ascii, ComparesBothSidesAsSent) {
  EXPECT_TRUE(EqualsIgnoreCase("Example.COM", "example.com"));
  EXPECT_TRUE(EqualsIgnoreCase("example.com", "EXAMPLE.com"));
  EXPECT_FALSE(EqualsIgnoreCase("example.com", "example.co"));
  EXPECT_FALSE(EqualsIgnoreCase("[::1]", "[::2]"));
  // A non-ASCII byte matches only itself.
  EXPECT_FALSE(EqualsIgnoreCase("caf\xc3\xa9", "CAF\xc3\x89"));
}

TEST(Ascii, FindsUppercaseAndAppendsLowered) {
  EXPECT_FALSE(HasAsciiUppercase("x-request-id"));
  EXPECT_TRUE(HasAsciiUppercase("x-Request-id"));
  std::string out = "prefix:";
  AppendAsciiLower("X-Trace-ID", &out);
  EXPECT_EQ(out, "prefix:x-trace-id");
}

static_assert(EqualsLowercase("HTTPS", "https"));
static_assert(!EqualsIgnoreCase("http", "https"));

// The word-at-a-time path (eight bytes and more) agrees with the byte loop for every byte value
// at every position of every length to 24, over a background of lowercase and of bytes >= 0x80.
TEST(Ascii, FindsAnUppercaseLetterAtEveryPositionWhateverTheByteValue) {
  auto by_loop = [](std::string_view s) {
    for (char c : s) {
      if (c >= 'A' && c <= 'Z') return true;
    }
    return false;
  };
  for (char background : {'a', '\xc1', '@', '['}) {
    for (size_t n = 1; n <= 24; ++n) {
      for (size_t at = 0; at < n; ++at) {
        for (int v = 0; v < 256; ++v) {
          std::string s(n, background);
          s[at] = static_cast<char>(v);
          ASSERT_EQ(HasAsciiUppercase(s), by_loop(s))
              << "length " << n << ", byte " << v << " at " << at << " in '" << background << "'";
        }
      }
    }
  }
  static_assert(HasAsciiUppercase("content-Type"));  // still a constant expression
  static_assert(!HasAsciiUppercase("content-type"));
}

}  // namespace
}  // namespace sluice
