#include "core/uring.h"

#include <gtest/gtest.h>
#include <liburing.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/tick_clock.h"

namespace sluice {
namespace {

// Each completion queues two no-ops: once the submission queue is full it is submitted from
// inside a completion, and the kernel completes no-ops during that submission, so new
// completions keep arriving while the earlier ones are handed out.
class Resubmitting final : public UringOperation {
 public:
  Resubmitting(Uring* uring, int budget) : uring_(uring), budget_(budget) {}
  void OnCompletion(int32_t result, uint32_t) override {
    ++completions;
    if (result != 0) ++failures;
    for (int i = 0; i < 2 && budget_ > 0; ++i, --budget_) io_uring_prep_nop(uring_->NewSqe(this));
  }
  int completions = 0;
  int failures = 0;

 private:
  Uring* const uring_;
  int budget_;
};

TEST(Uring, HandsAtMostOneCompletionQueueAtATimeWhileOperationsKeepCompletingAtOnce) {
  // Big enough that the completion queue holds more than one batch the ring copies out at a time.
  constexpr unsigned kEntries = 256;
  StatusOr<std::unique_ptr<Uring>> created = Uring::Create({.entries = kEntries});
  if (!created.ok()) GTEST_SKIP() << created.status().ToString();
  Uring& uring = **created;
  constexpr int kBudget = 10'000;
  Resubmitting op(&uring, kBudget);
  io_uring_prep_nop(uring.NewSqe(&op));
  // Every call hands a bounded number; none is lost. More than a completion queue's worth waits
  // at some point (the kernel keeps what overflows), so the largest call meets the bound.
  size_t total = 0;
  size_t largest = 0;
  for (int calls = 0; uring.in_flight() > 0 && calls < kBudget; ++calls) {
    uring.SubmitAndWait(1000);
    const size_t handed = uring.DispatchCompletions();
    ASSERT_GT(handed, 0u) << "nothing completed within 1 s; in flight: " << uring.in_flight();
    largest = std::max(largest, handed);
    total += handed;
  }
  // The completion queue is twice the submission queue.
  EXPECT_EQ(largest, 2 * kEntries);
  EXPECT_EQ(uring.in_flight(), 0u);
  EXPECT_EQ(total, static_cast<size_t>(kBudget) + 1);
  EXPECT_EQ(op.completions, kBudget + 1);
  EXPECT_EQ(op.failures, 0);
}

// Records the pass stamp its completion ran under, and asks to hear when that piece ends.
class StampRecorder final : public UringOperation {
 public:
  void OnCompletion(int32_t, uint32_t) override {
    if (before != nullptr) piece_before_had_ended = before->piece_ended_before_the_next;
    stamp = TickClock::PassTicks();
    piece_ended_before_the_next = false;
    EXPECT_TRUE(TickClock::AtPieceEnd(
        [](void* self, uint64_t) {
          static_cast<StampRecorder*>(self)->piece_ended_before_the_next = true;
        },
        this));
  }
  uint64_t stamp = 0;
  bool piece_ended_before_the_next = false;
  // The completion that runs before this one, and whether its piece had ended when this ran.
  const StampRecorder* before = nullptr;
  bool piece_before_had_ended = false;
};

// Two no-ops submitted together, each recording the stamp its completion ran under.
class UringPieces : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<Uring>> created = Uring::Create({});
    if (!created.ok()) GTEST_SKIP() << created.status().ToString();
    uring_ = std::move(*created);
    io_uring_prep_nop(uring_->NewSqe(&first_));
    io_uring_prep_nop(uring_->NewSqe(&second_));
    second_.before = &first_;
  }
  void TearDown() override { TickClock::ClearPass(); }

  std::unique_ptr<Uring> uring_;
  StampRecorder first_, second_;
};

TEST_F(UringPieces, EachCompletionIsAPieceOfItsOwnWhenTheLoopStampsPieces) {
  for (int tries = 0; tries < 100 && uring_->in_flight() > 0; ++tries) {
    uring_->SubmitAndWait(1000);
    TickClock::StampPass();  // what a stamping loop does as its pass begins
    const uint64_t pass = TickClock::PassTicks();
    const bool first_done = first_.stamp != 0;
    uring_->DispatchCompletions(/*stamp_pieces=*/true);
    if (!first_done && first_.stamp != 0) {
      EXPECT_EQ(first_.stamp, pass);  // the first of a call takes the pass's stamp
    }
    TickClock::EndPass();
  }
  ASSERT_NE(first_.stamp, 0u);
  ASSERT_NE(second_.stamp, 0u);
  // No-ops submitted together complete together: the second began a piece of its own, which
  // ended the first's piece.
  EXPECT_GT(second_.stamp, first_.stamp);
  EXPECT_TRUE(second_.piece_before_had_ended);       // ended by the second's stamp
  EXPECT_TRUE(second_.piece_ended_before_the_next);  // by the pass's end
}

TEST_F(UringPieces, CompletionsShareTheirCallersPieceUnlessAskedToStamp) {
  TickClock::StampPass();
  const uint64_t pass = TickClock::PassTicks();
  for (int tries = 0; tries < 100 && uring_->in_flight() > 0; ++tries) {
    uring_->SubmitAndWait(1000);
    uring_->DispatchCompletions();
  }
  EXPECT_EQ(first_.stamp, pass);
  EXPECT_EQ(second_.stamp, pass);
  EXPECT_FALSE(second_.piece_before_had_ended);  // one piece: it ends with the pass
}

}  // namespace
}  // namespace sluice
