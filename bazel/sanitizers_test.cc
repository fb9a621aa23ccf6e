// Proves that --config=asan and --config=tsan really instrument the build: each sanitizer that is
// linked must catch a bug planted here (in a death-test child process). Cases whose sanitizer is
// not in the build are skipped, so the test passes trivially in a plain build.
#include <gtest/gtest.h>

#include <climits>
#include <thread>

#if defined(__SANITIZE_ADDRESS__)
#define SLUICE_TEST_ASAN 1
#include <sanitizer/lsan_interface.h>
#endif
#if defined(__SANITIZE_THREAD__)
#define SLUICE_TEST_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(SLUICE_TEST_ASAN)
#define SLUICE_TEST_ASAN 1
#include <sanitizer/lsan_interface.h>
#endif
#if __has_feature(thread_sanitizer) && !defined(SLUICE_TEST_TSAN)
#define SLUICE_TEST_TSAN 1
#endif
#endif

namespace {

// Keeps the compiler from proving the planted bugs away.
volatile int g_index = 8;
volatile int g_int_max = INT_MAX;

// A use after free (not an overflow, which UBSan's object-size check would report first).
[[maybe_unused]] __attribute__((noinline)) void WriteAfterFree() {
  volatile char* block = new char[8];
  delete[] block;
  block[g_index % 8] = 1;
}

[[maybe_unused]] __attribute__((noinline)) int OverflowSignedInt() { return g_int_max + g_index; }

// Allocates on a thread that then exits, so no live stack still points at the block.
[[maybe_unused]] void LeakAndCheck() {
  std::thread([] {
    volatile char* leaked = new char[64];
    leaked[0] = 1;
  }).join();
#if defined(SLUICE_TEST_ASAN)
  __lsan_do_leak_check();
#endif
}

int g_shared_counter = 0;

[[maybe_unused]] void RaceOnCounter() {
  std::thread writer([] { ++g_shared_counter; });
  ++g_shared_counter;  // not ordered with the writer's increment: a data race
  writer.join();
}

class Sanitizers : public testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(Sanitizers, AddressSanitizerCatchesUseAfterFree) {
#if defined(SLUICE_TEST_ASAN)
  EXPECT_DEATH(WriteAfterFree(), "AddressSanitizer: heap-use-after-free");
#else
  GTEST_SKIP() << "not built with AddressSanitizer";
#endif
}

TEST_F(Sanitizers, LeakSanitizerCatchesLeak) {
#if defined(SLUICE_TEST_ASAN)
  EXPECT_DEATH(LeakAndCheck(), "LeakSanitizer: detected memory leaks");
#else
  GTEST_SKIP() << "not built with AddressSanitizer";
#endif
}

// Neither compiler announces UBSan with a macro: --config=asan defines SLUICE_EXPECT_UBSAN here.
TEST_F(Sanitizers, UndefinedBehaviorSanitizerCatchesSignedOverflow) {
#if defined(SLUICE_EXPECT_UBSAN)
  EXPECT_DEATH(static_cast<void>(OverflowSignedInt()), "runtime error: signed integer overflow");
#else
  GTEST_SKIP() << "not built with UndefinedBehaviorSanitizer";
#endif
}

TEST_F(Sanitizers, ThreadSanitizerCatchesDataRace) {
#if defined(SLUICE_TEST_TSAN)
  EXPECT_DEATH(RaceOnCounter(), "ThreadSanitizer: data race");
#else
  GTEST_SKIP() << "not built with ThreadSanitizer";
#endif
}

}  // namespace
