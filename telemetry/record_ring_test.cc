#include "telemetry/record_ring.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace sluice::telemetry {
namespace {

bool Write(RecordRing& ring, const std::string& value) {
  return ring.TryWrite(value.size(),
                       [&value](char* at) { std::memcpy(at, value.data(), value.size()); });
}

// The oldest record, or "<none>".
std::string Read(RecordRing& ring) {
  std::string out = "<none>";
  ring.TryRead([&out](const char* at, size_t size) { out.assign(at, size); });
  return out;
}

TEST(RecordRing, ARecordThatWouldCrossTheEndStartsAgainAtTheBeginning) {
  RecordRing ring(128);  // records of 40 bytes take 48
  ASSERT_EQ(ring.capacity(), 128u);
  const std::string a(40, 'a'), b(40, 'b'), c(40, 'c');
  ASSERT_TRUE(Write(ring, a));   // [0, 48)
  ASSERT_TRUE(Write(ring, b));   // [48, 96)
  EXPECT_FALSE(Write(ring, c));  // 32 bytes to the end, and [0, 48) not read yet
  EXPECT_EQ(Read(ring), a);
  ASSERT_TRUE(Write(ring, c));  // padding over [96, 128), then [0, 48) again
  EXPECT_EQ(ring.ApproxBytes(), 48u + 32u + 48u);
  EXPECT_EQ(Read(ring), b);
  EXPECT_EQ(Read(ring), c);  // past the padding
  EXPECT_EQ(Read(ring), "<none>");
  EXPECT_EQ(ring.ApproxBytes(), 0u);
}

TEST(RecordRing, AFullRingRefusesAndTakesAgainOnceRead) {
  RecordRing ring(256);
  int accepted = 0;
  while (Write(ring, std::to_string(accepted))) ++accepted;
  EXPECT_EQ(accepted, 256 / 16);  // each short record: 8 bytes of header, 8 of body
  EXPECT_EQ(Read(ring), "0");
  EXPECT_TRUE(Write(ring, "again"));
  EXPECT_FALSE(Write(ring, "full"));
  for (int i = 1; i < accepted; ++i) EXPECT_EQ(Read(ring), std::to_string(i));
  EXPECT_EQ(Read(ring), "again");
}

TEST(RecordRing, EmptyRecordsAndRecordsOverHalfTheRing) {
  RecordRing ring(256);
  EXPECT_EQ(ring.max_record(), 120u);
  EXPECT_FALSE(Write(ring, std::string(121, 'x')));  // could not fit with the padding before it
  EXPECT_TRUE(Write(ring, std::string(120, 'x')));
  EXPECT_TRUE(Write(ring, ""));
  EXPECT_EQ(Read(ring), std::string(120, 'x'));
  bool called = false;
  size_t size = 99;
  EXPECT_TRUE(ring.TryRead([&](const char*, size_t n) {
    called = true;
    size = n;
  }));
  EXPECT_TRUE(called);
  EXPECT_EQ(size, 0u);
}

TEST(RecordRing, AnUnpublishedRecordHoldsBackTheOnesWrittenAfterIt) {
  RecordRing ring(1024);
  std::atomic<bool> reserved{false}, finish{false};
  std::thread slow([&] {
    ASSERT_TRUE(ring.TryWrite(5, [&](char* at) {
      reserved.store(true);
      reserved.notify_all();
      finish.wait(false);  // still writing
      std::memcpy(at, "first", 5);
    }));
  });
  reserved.wait(false);
  ASSERT_TRUE(Write(ring, "second"));  // published before the first is
  EXPECT_EQ(Read(ring), "<none>");     // the reader waits for the oldest
  finish.store(true);
  finish.notify_all();
  slow.join();
  EXPECT_EQ(Read(ring), "first");
  EXPECT_EQ(Read(ring), "second");
}

// Producers write records of many sizes, each telling who wrote it, its number and a pattern in
// its bytes, trying again while the ring is full; the consumer reads while they write, laps the
// ring hundreds of times, and finds every record whole, once, and in each producer's order.
TEST(RecordRing, ManyProducersOneConsumerGetEveryRecordWholeAndInOrder) {
  RecordRing ring(4096);
  constexpr int kProducers = 4;
  constexpr uint32_t kEach = 5000;
  std::atomic<int> running{kProducers};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint32_t i = 0; i < kEach; ++i) {
        const size_t size = 8 + (i * 37 + p * 11) % 300;
        auto fill = [&](char* at) {
          const uint32_t who = static_cast<uint32_t>(p);
          std::memcpy(at, &who, 4);
          std::memcpy(at + 4, &i, 4);
          for (size_t k = 8; k < size; ++k) at[k] = static_cast<char>(who * 31 + i + k);
        };
        while (!ring.TryWrite(size, fill)) std::this_thread::yield();  // full: the reader frees
      }
      running.fetch_sub(1);
    });
  }
  uint64_t read = 0;
  int64_t last[kProducers] = {-1, -1, -1, -1};
  bool whole = true;
  auto check = [&](const char* at, size_t size) {
    uint32_t who = 0, i = 0;
    std::memcpy(&who, at, 4);
    std::memcpy(&i, at + 4, 4);
    ASSERT_LT(who, static_cast<uint32_t>(kProducers));
    EXPECT_EQ(size, 8 + (i * 37 + who * 11) % 300);
    for (size_t k = 8; k < size; ++k) whole &= at[k] == static_cast<char>(who * 31 + i + k);
    EXPECT_GT(static_cast<int64_t>(i), last[who]);
    last[who] = i;
    ++read;
  };
  while (running.load() > 0) ring.TryRead(check);
  while (ring.TryRead(check)) {
  }
  for (auto& p : producers) p.join();
  EXPECT_TRUE(whole);
  EXPECT_EQ(read, uint64_t{kProducers} * kEach);
  for (int64_t l : last) EXPECT_EQ(l, int64_t{kEach} - 1);
}

}  // namespace
}  // namespace sluice::telemetry
