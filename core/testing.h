// Test support for code built on core/: a diagnostic memory pool that fails
// the test if anything leaked, was returned twice or was written after
// return.
//
//   class PipeTest : public sluice::testing::DiagnosticPoolTest {};
//   TEST_F(PipeTest, Something) { sluice::Pipe pipe({.pool = &pool()}); ... }
//
// Thread-safety: as gtest fixtures; the pool itself is thread-safe.
#ifndef SLUICE_CORE_TESTING_H_
#define SLUICE_CORE_TESTING_H_

#include <gtest/gtest.h>

#include "core/memory_pool.h"

namespace sluice::testing {

class DiagnosticPoolTest : public ::testing::Test {
 protected:
  MemoryPool& pool() { return pool_; }

  // Objects holding blocks must be destroyed before this runs: declare them
  // inside the test body, or reset them in the subclass's TearDown before
  // calling this one.
  void TearDown() override {
    Status clean = pool_.CheckClean();
    EXPECT_TRUE(clean.ok()) << clean.ToString();
  }

 private:
  MemoryPool pool_{MemoryPoolOptions{.block_size = 4096, .diagnostic = true}};
};

}  // namespace sluice::testing

#endif  // SLUICE_CORE_TESTING_H_
