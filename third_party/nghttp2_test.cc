// //third_party:nghttp2 links libnghttp2: HPACK round trips and the RFC 7541 examples decode.
#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sluice_deps/versions.h"

namespace {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct DeflaterDeleter {
  void operator()(nghttp2_hd_deflater* deflater) const { nghttp2_hd_deflate_del(deflater); }
};
struct InflaterDeleter {
  void operator()(nghttp2_hd_inflater* inflater) const { nghttp2_hd_inflate_del(inflater); }
};

// Encodes `headers` as one HPACK block; nullopt on an nghttp2 error.
std::optional<std::vector<uint8_t>> Deflate(nghttp2_hd_deflater* deflater, const Headers& headers) {
  std::vector<nghttp2_nv> nva;
  for (const auto& [name, value] : headers) {
    nva.push_back(nghttp2_nv{const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(name.data())),
                             const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(value.data())),
                             name.size(), value.size(), NGHTTP2_NV_FLAG_NONE});
  }
  std::vector<uint8_t> block(nghttp2_hd_deflate_bound(deflater, nva.data(), nva.size()));
  const ssize_t length =
      nghttp2_hd_deflate_hd(deflater, block.data(), block.size(), nva.data(), nva.size());
  if (length < 0) return std::nullopt;
  block.resize(static_cast<size_t>(length));
  return block;
}

// Decodes one complete HPACK block; nullopt on an nghttp2 error.
std::optional<Headers> Inflate(nghttp2_hd_inflater* inflater, const std::vector<uint8_t>& block) {
  Headers headers;
  const uint8_t* in = block.data();
  size_t remaining = block.size();
  for (;;) {
    nghttp2_nv nv;
    int flags = 0;
    const ssize_t used = nghttp2_hd_inflate_hd2(inflater, &nv, &flags, in, remaining, 1);
    if (used < 0) return std::nullopt;
    in += used;
    remaining -= static_cast<size_t>(used);
    if (flags & NGHTTP2_HD_INFLATE_EMIT) {
      headers.emplace_back(std::string(reinterpret_cast<const char*>(nv.name), nv.namelen),
                           std::string(reinterpret_cast<const char*>(nv.value), nv.valuelen));
    }
    if (flags & NGHTTP2_HD_INFLATE_FINAL) {
      nghttp2_hd_inflate_end_headers(inflater);
      return headers;
    }
    if ((flags & NGHTTP2_HD_INFLATE_EMIT) == 0 && remaining == 0) return headers;
  }
}

TEST(Nghttp2, LibraryMatchesHeadersAndPinnedPackage) {
  const nghttp2_info* info = nghttp2_version(0);
  ASSERT_NE(info, nullptr);
  EXPECT_STREQ(info->version_str, NGHTTP2_VERSION);
  const std::string package_version = sluice::deps::kNghttp2Version;
  EXPECT_TRUE(package_version.starts_with(std::string(info->version_str) + "-"))
      << "libnghttp2 " << info->version_str << " vs. Debian package " << package_version;
}

TEST(Nghttp2Hpack, DeflateInflateRoundTripsHeaders) {
  nghttp2_hd_deflater* raw_deflater = nullptr;
  ASSERT_EQ(nghttp2_hd_deflate_new(&raw_deflater, 4096), 0);
  std::unique_ptr<nghttp2_hd_deflater, DeflaterDeleter> deflater(raw_deflater);
  nghttp2_hd_inflater* raw_inflater = nullptr;
  ASSERT_EQ(nghttp2_hd_inflate_new(&raw_inflater), 0);
  std::unique_ptr<nghttp2_hd_inflater, InflaterDeleter> inflater(raw_inflater);

  const Headers headers = {
      {":method", "GET"},
      {":path", "/index.html"},
      {":authority", "sluice.example"},
      {"x-sluice-trace", "0123456789abcdef"},
  };
  const std::optional<std::vector<uint8_t>> first = Deflate(deflater.get(), headers);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(Inflate(inflater.get(), *first), headers);

  // The second block refers to the dynamic table both sides built from the first.
  const std::optional<std::vector<uint8_t>> second = Deflate(deflater.get(), headers);
  ASSERT_TRUE(second.has_value());
  EXPECT_LT(second->size(), first->size());
  EXPECT_EQ(Inflate(inflater.get(), *second), headers);
}

TEST(Nghttp2Hpack, InflatesRfc7541HuffmanExample) {
  // RFC 7541, Appendix C.4.1: first request, Huffman-coded.
  const std::vector<uint8_t> block = {0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5,
                                      0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff};
  nghttp2_hd_inflater* raw_inflater = nullptr;
  ASSERT_EQ(nghttp2_hd_inflate_new(&raw_inflater), 0);
  std::unique_ptr<nghttp2_hd_inflater, InflaterDeleter> inflater(raw_inflater);
  const Headers expected = {
      {":method", "GET"},
      {":scheme", "http"},
      {":path", "/"},
      {":authority", "www.example.com"},
  };
  EXPECT_EQ(Inflate(inflater.get(), block), expected);
}

}  // namespace
