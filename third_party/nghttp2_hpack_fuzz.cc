// Feeds arbitrary bytes to nghttp2's HPACK inflater as one header block. Exercises sluice_cc_fuzz
// and //third_party:nghttp2 under --config=fuzz; the corpus holds RFC 7541's examples.
#include <nghttp2/nghttp2.h>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nghttp2_hd_inflater* inflater = nullptr;
  if (nghttp2_hd_inflate_new(&inflater) != 0) return 0;
  for (;;) {
    nghttp2_nv nv;
    int flags = 0;
    const ssize_t used = nghttp2_hd_inflate_hd2(inflater, &nv, &flags, data, size, 1);
    if (used < 0) break;
    data += used;
    size -= static_cast<size_t>(used);
    if (flags & NGHTTP2_HD_INFLATE_FINAL) {
      nghttp2_hd_inflate_end_headers(inflater);
      break;
    }
    if ((flags & NGHTTP2_HD_INFLATE_EMIT) == 0 && size == 0) break;
  }
  nghttp2_hd_inflate_del(inflater);
  return 0;
}
