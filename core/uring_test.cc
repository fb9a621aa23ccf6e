#include "core/uring.h"

#include <gtest/gtest.h>
#include <liburing.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>

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

class Recorder final : public UringOperation {
 public:
  void OnCompletion(int32_t result, uint32_t) override {
    ++completions;
    last_result = result;
  }
  int completions = 0;
  int32_t last_result = 0;
};

// A request completed in its submission does not end the wait alone: the wait goes on for the
// next completion, up to the batch wait, then ends with what it has.
TEST(Uring, AWaitHoldsACompletionOfTheSubmissionForTheBatchWaitAtMost) {
  StatusOr<std::unique_ptr<Uring>> created =
      Uring::Create({.entries = 8, .buffer_count = 8, .batch_wait_us = 100'000});
  if (!created.ok()) GTEST_SKIP() << created.status().ToString();
  Uring& uring = **created;
  if (!uring.batches_waits()) GTEST_SKIP() << "the kernel lacks IORING_FEAT_MIN_TIMEOUT (6.12)";
  Recorder nop;
  io_uring_prep_nop(uring.NewSqe(&nop, /*completes_in_submit=*/true));
  const auto start = std::chrono::steady_clock::now();
  uring.SubmitAndWait(10'000);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(uring.DispatchCompletions(), 1u);
  EXPECT_EQ(nop.completions, 1);
  EXPECT_GE(waited, std::chrono::milliseconds(90));  // the batch wait, not the timeout
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_EQ(uring.stats().enters, 1u);
}

// A send's completion and the answer that follows come back from one wait (one system call),
// as soon as the answer arrives: the wait for a quiet connection's next request.
TEST(Uring, AWaitEndsWithTheFirstCompletionBeyondThoseOfTheSubmission) {
  StatusOr<std::unique_ptr<Uring>> created =
      Uring::Create({.entries = 8, .buffer_count = 8, .batch_wait_us = 5'000'000});
  if (!created.ok()) GTEST_SKIP() << created.status().ToString();
  Uring& uring = **created;
  if (!uring.batches_waits()) GTEST_SKIP() << "the kernel lacks IORING_FEAT_MIN_TIMEOUT (6.12)";
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  Recorder send;
  Recorder receive;
  static const char kRequest[] = "x";
  io_uring_prep_send(uring.NewSqe(&send, /*completes_in_submit=*/true), fds[0], kRequest, 1, 0);
  char answer = 0;
  io_uring_prep_recv(uring.NewSqe(&receive), fds[0], &answer, 1, 0);
  // The peer answers once it has read the request, after the wait began (its delay makes that
  // likely; were it sooner, the receive would complete in the submission and prove nothing
  // wrong either).
  std::thread peer([fd = fds[1]] {
    char got = 0;
    if (read(fd, &got, 1) != 1) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const char reply = 'y';
    (void)!write(fd, &reply, 1);
  });
  const auto start = std::chrono::steady_clock::now();
  uring.SubmitAndWait(10'000);
  const auto waited = std::chrono::steady_clock::now() - start;
  const size_t completed = uring.DispatchCompletions();  // before the peer is joined
  peer.join();
  EXPECT_EQ(completed, 2u);
  EXPECT_EQ(send.last_result, 1);
  EXPECT_EQ(receive.last_result, 1);
  EXPECT_EQ(answer, 'y');
  EXPECT_LT(waited, std::chrono::seconds(4));  // ended by the answer, not the batch wait
  EXPECT_EQ(uring.stats().enters, 1u);
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace sluice
