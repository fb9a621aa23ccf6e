#include "core/bytes.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice {
namespace {

// Every length from 0 to 40 (the eight-byte loop, the overlapping words, the byte tail), with a
// difference planted at each position: found wherever it is, and equal copies compare equal.
TEST(SameBytes, FindsADifferenceAtEveryPositionOfEveryLength) {
  for (size_t n = 0; n <= 40; ++n) {
    std::string a(n, 'x');
    for (size_t i = 0; i < n; ++i) a[i] = static_cast<char>('a' + i % 26);
    std::string b = a;
    EXPECT_TRUE(SameBytes(a.data(), b.data(), n)) << "length " << n;
    for (size_t at = 0; at < n; ++at) {
      std::string c = a;
      c[at] = static_cast<char>(c[at] ^ 0x80);
      EXPECT_FALSE(SameBytes(a.data(), c.data(), n)) << "length " << n << ", at " << at;
    }
  }
}

TEST(BytesEqual, ComparesLengthThenBytes) {
  EXPECT_TRUE(BytesEqual("", ""));
  EXPECT_TRUE(BytesEqual("/plaintext", "/plaintext"));
  EXPECT_FALSE(BytesEqual("/plaintext", "/plaintexT"));
  EXPECT_FALSE(BytesEqual("/plain", "/plaintext"));  // a prefix is not equal
  EXPECT_FALSE(BytesEqual("GET", "GE"));
  // Bytes past the views' ends are not read into the answer.
  const std::string long_text = "GETX";
  EXPECT_TRUE(BytesEqual(std::string_view(long_text.data(), 3), "GET"));
}

// Every length from 0 to 40 (the byte, the overlapping words of each size, memcpy), copied from
// and to odd addresses: exactly those bytes arrive, nothing around them is touched.
TEST(CopyBytes, CopiesExactlyNBytesOfEveryLength) {
  for (size_t n = 0; n <= 40; ++n) {
    std::string src(n + 2, '?');
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>('a' + i % 26);
    std::string dst(n + 4, '.');
    CopyBytes(dst.data() + 1, src.data() + 1, n);
    EXPECT_EQ(dst.substr(1, n), src.substr(1, n)) << "length " << n;
    EXPECT_EQ(dst[0], '.') << "length " << n;
    EXPECT_EQ(dst.substr(1 + n), std::string(3, '.')) << "length " << n;
  }
  CopyBytes(nullptr, nullptr, 0);  // an empty copy reads and writes nothing
}

}  // namespace
}  // namespace sluice
