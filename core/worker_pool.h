// A fixed pool of worker threads running posted tasks in FIFO order.
//
// Handlers that may block (or that the user wants off the event loop) run
// here when a server is started with --handler-threads N. Many HTTP/2
// streams of one connection then complete on different workers at once,
// which is the situation the concurrent output strategies exist for.
//
//   sluice::WorkerPool pool(4);
//   pool.Post([] { DoWork(); });
//   pool.Stop();  // runs what was queued, then joins
//
// Thread-safety: thread-safe.
#ifndef SLUICE_CORE_WORKER_POOL_H_
#define SLUICE_CORE_WORKER_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "core/mutex.h"

namespace sluice {

class WorkerPool {
 public:
  // Starts `threads` workers (at least 1).
  explicit WorkerPool(int threads);
  // Stop()s.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task`. Returns false (and drops it) once Stop has begun.
  bool Post(std::function<void()> task);
  // Runs every queued task, then joins the workers. Idempotent.
  void Stop();

  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void Run();

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_WORKER_POOL_H_
