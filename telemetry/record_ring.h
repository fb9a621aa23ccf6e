// A bounded ring of variable-size byte records: many producers, one consumer. A record takes
// the bytes it needs (plus an 8-byte header, rounded up to 8), so a queue of records that are
// usually small but may be long holds many small ones in little memory: what AsyncListener
// queues exchanges in. TryWrite never blocks and never allocates: when the ring lacks the room it
// returns false and the caller counts a drop.
//
//   RecordRing ring(1 << 20);
//   if (!ring.TryWrite(n, [&](char* at) { std::memcpy(at, data, n); })) ++dropped;   // any thread
//   ring.TryRead([](const char* at, size_t n) { ... });                 // the one consumer
//
// How: producers reserve room by advancing the write position with a compare-and-swap, write
// their bytes, then publish the record by storing its header word (release). A record never
// wraps: when it does not fit before the ring's end, its producer reserves the end's bytes too and
// marks them as padding. The consumer reads records in order; an unpublished one (still being
// written) stops it until published, even if later ones are. It zeroes each record after reading
// it, so a header word that nobody has published yet always reads zero. The ring's memory comes
// from the allocator zeroed and untouched (calloc of a large block maps fresh pages): it costs
// resident memory only as far as the ring has gone round.
//
// Thread contract: TryWrite from any thread; TryRead from one consumer thread at a time.
#ifndef SLUICE_TELEMETRY_RECORD_RING_H_
#define SLUICE_TELEMETRY_RECORD_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

namespace sluice::telemetry {

class RecordRing {
 public:
  // Room in bytes, rounded up to a power of two (at least 64).
  explicit RecordRing(size_t bytes) {
    size_t n = 64;
    while (n < bytes) n *= 2;
    mask_ = n - 1;
    words_ = static_cast<uint64_t*>(std::calloc(n / 8, 8));
    if (words_ == nullptr) throw std::bad_alloc();
  }
  ~RecordRing() { std::free(words_); }
  RecordRing(const RecordRing&) = delete;
  RecordRing& operator=(const RecordRing&) = delete;

  size_t capacity() const { return mask_ + 1; }
  // The most a record may hold: half the ring, so that a record and the padding before it fit.
  size_t max_record() const { return capacity() / 2 - kHeader; }
  // Bytes reserved and not yet read, records and their headers and padding (any thread;
  // approximate while others write or read).
  size_t ApproxBytes() const {
    const uint64_t in = write_.load(std::memory_order_relaxed);
    const uint64_t out = read_.load(std::memory_order_relaxed);
    return in > out ? static_cast<size_t>(in - out) : 0;
  }

  // Reserves `size` bytes, calls fill(char* at) to write them (8-byte aligned), and publishes
  // them; or returns false if the ring lacks the room (or size > max_record()). `fill` must not
  // throw: a reserved record that is never published would stop the consumer for good.
  template <typename Fill>
  bool TryWrite(size_t size, Fill fill) {
    if (size > max_record()) return false;
    const uint64_t need = kHeader + RoundUp(size);
    uint64_t at = write_.load(std::memory_order_relaxed);
    uint64_t pad = 0;
    for (;;) {
      const uint64_t to_end = capacity() - (at & mask_);
      pad = need > to_end ? to_end : 0;
      // Acquire: the consumer's zeroing of what it freed comes before our writes there.
      const uint64_t read = read_.load(std::memory_order_acquire);
      if (read > at) {  // `at` went stale while others wrote and the reader caught up: look again
        at = write_.load(std::memory_order_relaxed);
        continue;
      }
      if (at + pad + need - read > capacity()) return false;
      if (write_.compare_exchange_weak(at, at + pad + need, std::memory_order_relaxed)) break;
    }
    if (pad != 0) Header(at).store(Word(pad, kPadding), std::memory_order_release);
    const uint64_t start = at + pad;
    fill(Bytes(start + kHeader));
    Header(start).store(Word(size, kRecord), std::memory_order_release);
    return true;
  }

  // Reads the oldest record, if it is published: calls read(const char* at, size_t size) where it
  // lies, then frees its room. Returns false when the ring is empty or its oldest record is still
  // being written. `read` must not throw.
  template <typename Read>
  bool TryRead(Read read) {
    uint64_t at = read_.load(std::memory_order_relaxed);  // only this thread writes it
    for (;;) {
      const uint64_t word = Header(at).load(std::memory_order_acquire);
      if (word == 0) return false;
      const uint64_t length = word >> 2;
      if ((word & kPadding) == kPadding) {
        Header(at).store(0, std::memory_order_relaxed);
        at += length;
        read_.store(at, std::memory_order_release);
        continue;
      }
      read(static_cast<const char*>(Bytes(at + kHeader)), static_cast<size_t>(length));
      const uint64_t taken = kHeader + RoundUp(length);
      // Zero the record, header and body alike: any of its words may be a header next time round.
      std::memset(Bytes(at + kHeader), 0, taken - kHeader);
      Header(at).store(0, std::memory_order_relaxed);
      read_.store(at + taken, std::memory_order_release);
      return true;
    }
  }

 private:
  static constexpr uint64_t kHeader = 8;
  // Header word: length << 2 | kind, where the kind's low bit says published; zero while
  // unpublished. A padding header's length counts its own 8 bytes.
  static constexpr uint64_t kRecord = 1;
  static constexpr uint64_t kPadding = 3;
  static uint64_t Word(uint64_t length, uint64_t kind) { return length << 2 | kind; }
  static uint64_t RoundUp(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

  std::atomic_ref<uint64_t> Header(uint64_t position) const {
    return std::atomic_ref<uint64_t>(words_[(position & mask_) / 8]);
  }
  char* Bytes(uint64_t position) const {
    return reinterpret_cast<char*>(words_) + (position & mask_);
  }

  size_t mask_ = 0;
  uint64_t* words_ = nullptr;
  // Producers and the consumer write different positions: keep them off one cache line (padding,
  // not alignas, so the ring needs no over-aligned allocation or stack slot).
  [[maybe_unused]] char pad0_[64];
  std::atomic<uint64_t> write_{0};
  [[maybe_unused]] char pad1_[64];
  std::atomic<uint64_t> read_{0};
};

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_RECORD_RING_H_
