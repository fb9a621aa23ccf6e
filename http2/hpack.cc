#include "http2/hpack.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "core/bytes.h"

namespace sluice::http2 {
namespace {

// The errors nghttp2's HPACK functions document, by name.
std::string_view Nghttp2ErrorName(int code) {
  switch (code) {
    case NGHTTP2_ERR_HEADER_COMP:
      return "NGHTTP2_ERR_HEADER_COMP";
    case NGHTTP2_ERR_NOMEM:
      return "NGHTTP2_ERR_NOMEM";
    case NGHTTP2_ERR_BUFFER_ERROR:
      return "NGHTTP2_ERR_BUFFER_ERROR";
    case NGHTTP2_ERR_INSUFF_BUFSIZE:
      return "NGHTTP2_ERR_INSUFF_BUFSIZE";
    case NGHTTP2_ERR_INVALID_STATE:
      return "NGHTTP2_ERR_INVALID_STATE";
    default:
      return "nghttp2 error";
  }
}

// "HPACK decode: NGHTTP2_ERR_HEADER_COMP (Header compression/decompression error)".
std::string Describe(std::string_view operation, int code) {
  std::string message = "HPACK ";
  message += operation;
  message += ": ";
  message += Nghttp2ErrorName(code);
  message += " (";
  message += nghttp2_strerror(code);
  message += ")";
  return message;
}

uint8_t* Bytes(std::string_view s) {
  // nghttp2_nv has non-const pointers, but the deflater only reads (and copies what it indexes).
  return const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(s.data()));
}

// Reads an RFC 7541 §5.1 integer with a `prefix_bits` prefix at block[*i]; false if cut short or
// absurdly long.
bool SkipInteger(std::span<const uint8_t> block, size_t* i, int prefix_bits, uint64_t* value) {
  if (*i >= block.size()) return false;
  const uint8_t limit = static_cast<uint8_t>((1u << prefix_bits) - 1);
  uint64_t v = block[(*i)++] & limit;
  if (v == limit) {
    int shift = 0;
    for (;;) {
      if (*i >= block.size() || shift > 28) return false;
      const uint8_t b = block[(*i)++];
      v += static_cast<uint64_t>(b & 0x7f) << shift;
      shift += 7;
      if ((b & 0x80) == 0) break;
    }
  }
  *value = v;
  return true;
}

// Skips a string literal (§5.2: H bit, 7-bit-prefix length, the bytes).
bool SkipString(std::span<const uint8_t> block, size_t* i) {
  uint64_t length = 0;
  if (!SkipInteger(block, i, 7, &length) || length > block.size() - *i) return false;
  *i += length;
  return true;
}

// True if `block` is complete and well formed and leaves the dynamic table as it was: only
// indexed fields (§6.1) and literals without indexing or never indexed (§6.2.2, §6.2.3); no
// literal with incremental indexing and no table size update. A false may also mean "not
// understood here": nghttp2 then judges the block.
bool LeavesTableUnchanged(std::span<const uint8_t> block) {
  size_t i = 0;
  uint64_t index = 0;
  while (i < block.size()) {
    const uint8_t b = block[i];
    if ((b & 0x80) != 0) {  // indexed
      if (!SkipInteger(block, &i, 7, &index) || index == 0) return false;
    } else if ((b & 0xe0) == 0) {  // 0000xxxx or 0001xxxx: not indexed
      if (!SkipInteger(block, &i, 4, &index)) return false;
      if (index == 0 && !SkipString(block, &i)) return false;  // a literal name
      if (!SkipString(block, &i)) return false;                // the value
    } else {
      return false;  // incremental indexing, or a size update
    }
  }
  return true;
}

void AppendLength(size_t n, std::string* out) {
  const uint32_t v = static_cast<uint32_t>(n);
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

uint32_t ReadLength(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, sizeof(v));
  return v;
}

}  // namespace

// nghttp2 allocates and frees small blocks on every call (a buffer chain per deflate, a string
// per decoded field, table entries): up to kCached freed blocks of at most kMaxCachedBytes are
// kept and handed out again. Each block carries its capacity in a header (so realloc and reuse
// know it). Blocks come from operator new (nothrow), so allocation counters see them. Used by one
// encoder or decoder, whose calls are never concurrent.
struct HpackMemory {
  static constexpr size_t kCached = 16;
  static constexpr size_t kMaxCachedBytes = 4096;
  // Keeps the payload as aligned as malloc's.
  struct alignas(std::max_align_t) Header {
    size_t capacity;
  };

  nghttp2_mem mem{this, &Malloc, &Free, &Calloc, &Realloc};
  std::array<Header*, kCached> free_blocks{};
  size_t free_count = 0;

  ~HpackMemory() {
    for (size_t i = 0; i < free_count; ++i) ::operator delete(free_blocks[i]);
  }

  void* Get(size_t size) {
    // The smallest cached block that fits.
    size_t best = kCached;
    for (size_t i = 0; i < free_count; ++i) {
      if (free_blocks[i]->capacity >= size &&
          (best == kCached || free_blocks[i]->capacity < free_blocks[best]->capacity)) {
        best = i;
      }
    }
    Header* h;
    if (best != kCached) {
      h = free_blocks[best];
      free_blocks[best] = free_blocks[--free_count];
    } else {
      h = static_cast<Header*>(::operator new(sizeof(Header) + size, std::nothrow));
      if (h == nullptr) return nullptr;
      h->capacity = size;
    }
    return h + 1;
  }

  void Put(void* p) {
    if (p == nullptr) return;
    Header* h = static_cast<Header*>(p) - 1;
    if (free_count < kCached && h->capacity <= kMaxCachedBytes) {
      free_blocks[free_count++] = h;
    } else {
      ::operator delete(h);
    }
  }

  static void* Malloc(size_t size, void* self) {
    return static_cast<HpackMemory*>(self)->Get(size);
  }
  static void Free(void* p, void* self) { static_cast<HpackMemory*>(self)->Put(p); }
  static void* Calloc(size_t n, size_t size, void* self) {
    if (size != 0 && n > SIZE_MAX / size) return nullptr;
    void* p = static_cast<HpackMemory*>(self)->Get(n * size);
    if (p != nullptr) std::memset(p, 0, n * size);
    return p;
  }
  static void* Realloc(void* p, size_t size, void* self) {
    auto* memory = static_cast<HpackMemory*>(self);
    if (p == nullptr) return memory->Get(size);
    Header* h = static_cast<Header*>(p) - 1;
    if (h->capacity >= size) return p;
    void* grown = memory->Get(size);
    if (grown == nullptr) return nullptr;
    std::memcpy(grown, p, h->capacity);
    memory->Put(p);
    return grown;
  }
};

HpackEncoder::HpackEncoder(uint32_t max_table_size)
    : memory_(std::make_unique<HpackMemory>()), max_table_size_(max_table_size) {
  // On failure nghttp2 leaves deflater_ null, and Encode reports it.
  (void)nghttp2_hd_deflate_new2(&deflater_, max_table_size, &memory_->mem);
}

HpackEncoder::~HpackEncoder() {
  if (deflater_ != nullptr) nghttp2_hd_deflate_del(deflater_);
}

Status HpackEncoder::Encode(std::span<const HeaderField> fields, std::string* out) {
  if (deflater_ == nullptr) return InternalError("HPACK encode: no deflater (out of memory)");
  if (!kept_block_.empty() && fields.size() == kept_shape_.size()) {
    // The same fields as the kept block's, in the same order?
    const char* kept = kept_bytes_.data();
    bool same = true;
    for (size_t i = 0; i < fields.size(); ++i) {
      const HeaderField& f = fields[i];
      const KeptField& k = kept_shape_[i];
      if (k.name_size != f.name.size() || k.value_size != f.value.size() ||
          k.never_index != f.never_index || !SameBytes(kept, f.name.data(), f.name.size()) ||
          !SameBytes(kept + f.name.size(), f.value.data(), f.value.size())) {
        same = false;
        break;
      }
      kept += f.name.size() + f.value.size();
    }
    if (same) {
      out->append(kept_block_);
      ++reused_blocks_;
      return OkStatus();
    }
  }

  // A response's fields fit on the stack; only long lists allocate.
  constexpr size_t kInlineFields = 32;
  std::array<nghttp2_nv, kInlineFields> inline_nva;
  std::vector<nghttp2_nv> heap_nva;
  nghttp2_nv* nva = inline_nva.data();
  if (fields.size() > kInlineFields) {
    heap_nva.resize(fields.size());
    nva = heap_nva.data();
  }
  for (size_t i = 0; i < fields.size(); ++i) {
    const HeaderField& field = fields[i];
    // NO_COPY_* only matter to nghttp2's session (the deflater copies what it puts in its table
    // either way); set so the fields are never copied should nghttp2 start to honour them here.
    uint8_t nv_flags = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
    if (field.never_index) nv_flags |= NGHTTP2_NV_FLAG_NO_INDEX;
    nva[i] = nghttp2_nv{Bytes(field.name), Bytes(field.value), field.name.size(),
                        field.value.size(), nv_flags};
  }

  const size_t bound = nghttp2_hd_deflate_bound(deflater_, nva, fields.size());
  const size_t old_size = out->size();
  out->resize(old_size + bound);
  const ssize_t written = nghttp2_hd_deflate_hd(
      deflater_, reinterpret_cast<uint8_t*>(out->data()) + old_size, bound, nva, fields.size());
  if (written < 0) {
    out->resize(old_size);
    return InternalError(Describe("encode", static_cast<int>(written)));
  }
  out->resize(old_size + static_cast<size_t>(written));
  const std::span<const uint8_t> block(reinterpret_cast<const uint8_t*>(out->data()) + old_size,
                                       static_cast<size_t>(written));
  kept_block_.clear();
  kept_shape_.clear();
  kept_bytes_.clear();
  if (!block.empty() && LeavesTableUnchanged(block)) {
    // The table did not change: these fields encode to these bytes until it does.
    kept_block_.assign(reinterpret_cast<const char*>(block.data()), block.size());
    for (const HeaderField& f : fields) {
      kept_shape_.push_back({static_cast<uint32_t>(f.name.size()),
                             static_cast<uint32_t>(f.value.size()), f.never_index});
      kept_bytes_.append(f.name).append(f.value);
    }
  }
  return OkStatus();
}

void HpackEncoder::BreakForTesting() {
  if (deflater_ != nullptr) nghttp2_hd_deflate_del(deflater_);
  deflater_ = nullptr;
}

Status HpackEncoder::SetPeerTableSize(uint32_t size) {
  if (deflater_ == nullptr) return InternalError("HPACK encode: no deflater (out of memory)");
  kept_block_.clear();  // the next block starts with a table size update
  kept_shape_.clear();
  kept_bytes_.clear();
  // nghttp2 caps the size at the deflater's maximum as well; the min states our contract here.
  const int rv = nghttp2_hd_deflate_change_table_size(deflater_, std::min(size, max_table_size_));
  if (rv != 0) return InternalError(Describe("table size change", rv));
  return OkStatus();
}

HpackDecoder::HpackDecoder(uint32_t max_table_size) : memory_(std::make_unique<HpackMemory>()) {
  // inflater_ stays null on failure; Decode reports it.
  if (nghttp2_hd_inflate_new2(&inflater_, &memory_->mem) != 0) return;
  // Below the protocol's initial 4096, nghttp2 then requires the peer's next block to open with a
  // size update no larger than max_table_size.
  if (nghttp2_hd_inflate_change_table_size(inflater_, max_table_size) != 0) {
    nghttp2_hd_inflate_del(inflater_);
    inflater_ = nullptr;
  }
}

HpackDecoder::~HpackDecoder() {
  if (inflater_ != nullptr) nghttp2_hd_inflate_del(inflater_);
}

void HpackDecoder::CountTableSizeUpdates(std::span<const uint8_t> fragment) {
  for (const uint8_t byte : fragment) {
    switch (prefix_) {
      case BlockPrefix::kPastPrefix:
        return;
      case BlockPrefix::kSizeUpdateInteger:
        // RFC 7541 §5.1: continuation octets carry 0x80 until the last.
        if ((byte & 0x80) == 0) prefix_ = BlockPrefix::kOpcode;
        break;
      case BlockPrefix::kOpcode:
        // 001xxxxx: a dynamic table size update (RFC 7541 §6.3).
        if ((byte & 0xe0) != 0x20) {
          prefix_ = BlockPrefix::kPastPrefix;
          return;
        }
        ++table_size_updates_;
        // A 5-bit prefix of all ones continues in the following octets.
        if ((byte & 0x1f) == 0x1f) prefix_ = BlockPrefix::kSizeUpdateInteger;
        break;
    }
  }
}

bool HpackDecoder::IsKeptBlock(std::span<const uint8_t> fragment, bool final) const {
  return !in_block_ && final && !kept_block_.empty() && fragment.size() == kept_block_.size() &&
         std::memcmp(fragment.data(), kept_block_.data(), fragment.size()) == 0;
}

bool HpackDecoder::Replay(std::span<const uint8_t> fragment, bool final) {
  if (inflater_ == nullptr || failed_ || !IsKeptBlock(fragment, final)) return false;
  replayed_ = true;
  ++reused_blocks_;
  return true;
}

Status HpackDecoder::Decode(std::span<const uint8_t> fragment, bool final,
                            const FieldCallback& on_field) {
  replayed_ = false;
  if (inflater_ == nullptr) return InternalError("HPACK decode: no inflater (out of memory)");
  if (failed_) return InvalidArgumentError("HPACK decode: the inflater failed earlier");
  const bool whole_block = !in_block_ && final;
  replayed_ = IsKeptBlock(fragment, final);
  if (replayed_) {
    for (size_t at = 0; at < kept_fields_.size();) {
      const uint32_t name_size = ReadLength(kept_fields_, at);
      const uint32_t value_size = ReadLength(kept_fields_, at + 4);
      at += 8;
      on_field(std::string_view(kept_fields_).substr(at, name_size),
               std::string_view(kept_fields_).substr(at + name_size, value_size));
      at += name_size + value_size;
    }
    ++reused_blocks_;
    return OkStatus();
  }
  const bool keep = whole_block && !fragment.empty() && LeavesTableUnchanged(fragment);
  kept_block_.clear();
  kept_fields_.clear();
  in_block_ = !final;
  if (!keep) {
    Status s = DecodeWithNghttp2(fragment, final, on_field);
    if (!s.ok()) failed_ = true;
    return s;
  }
  // Decoded once, then kept with its fields (this block leaves the table as it was).
  Status s = DecodeWithNghttp2(fragment, final, [&](std::string_view name, std::string_view value) {
    AppendLength(name.size(), &kept_fields_);
    AppendLength(value.size(), &kept_fields_);
    kept_fields_.append(name).append(value);
    on_field(name, value);
  });
  if (!s.ok()) {
    failed_ = true;
    kept_fields_.clear();
    return s;
  }
  kept_block_.assign(reinterpret_cast<const char*>(fragment.data()), fragment.size());
  return OkStatus();
}

Status HpackDecoder::DecodeWithNghttp2(std::span<const uint8_t> fragment, bool final,
                                       const FieldCallback& on_field) {
  CountTableSizeUpdates(fragment);

  // An empty span may hold a null pointer; nghttp2 does pointer arithmetic on it.
  static constexpr uint8_t kNoBytes = 0;
  const uint8_t* in = fragment.empty() ? &kNoBytes : fragment.data();
  size_t remaining = fragment.size();
  for (;;) {
    nghttp2_nv nv;
    int inflate_flags = 0;
    const ssize_t used =
        nghttp2_hd_inflate_hd2(inflater_, &nv, &inflate_flags, in, remaining, final ? 1 : 0);
    if (used < 0) {
      // nghttp2 marks the inflater bad: every later call fails too, as the header promises.
      const int code = static_cast<int>(used);
      if (code == NGHTTP2_ERR_NOMEM) return InternalError(Describe("decode", code));
      return InvalidArgumentError(Describe("decode", code));
    }
    in += used;
    remaining -= static_cast<size_t>(used);
    if ((inflate_flags & NGHTTP2_HD_INFLATE_EMIT) != 0) {
      on_field(std::string_view(reinterpret_cast<const char*>(nv.name), nv.namelen),
               std::string_view(reinterpret_cast<const char*>(nv.value), nv.valuelen));
    }
    if ((inflate_flags & NGHTTP2_HD_INFLATE_FINAL) != 0) {
      nghttp2_hd_inflate_end_headers(inflater_);
      prefix_ = BlockPrefix::kOpcode;
      return OkStatus();
    }
    if ((inflate_flags & NGHTTP2_HD_INFLATE_EMIT) == 0) {
      // Without a field to emit nghttp2 returns only after consuming the whole fragment (keeping a
      // split field's partial state), or with FINAL for a final one. Anything else would loop
      // forever on peer input, so it is refused rather than assumed away.
      if (remaining != 0 || final) return InternalError("HPACK decode: inflater made no progress");
      return OkStatus();
    }
  }
}

}  // namespace sluice::http2
