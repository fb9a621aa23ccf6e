#include "loadgen/client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <utility>

#include "core/socket_transport.h"
#include "core/tls.h"
#include "core/transport_adapters.h"
#include "loadgen/worker.h"

namespace sluice::loadgen {

Client::Client(Worker* worker, int index, size_t capacity)
    : w_(worker),
      index_(index),
      paced_(worker->spec().rate > 0),
      interval_ns_(paced_ ? static_cast<int64_t>(std::llround(worker->spec().connections * 1e9 /
                                                              worker->spec().rate))
                          : 0),
      capacity_(capacity) {
  // Spread the connections' schedules evenly over one interval.
  next_intended_ns_ =
      w_->plan().start_ns + interval_ns_ * index_ / std::max(1, w_->spec().connections);
}

Client::~Client() = default;

void Client::Connect() {
  state_ = State::kConnecting;
  w_->ConnectStarted();
  connect_started_ns_ = NowNs();
  const uint64_t generation = ++generation_;
  RunPlan& plan = w_->plan();
  const SocketConnectionOptions options{
      .pool = &plan.pool,
      // At least this much room per read: a depth-16 batch of small responses is one read.
      .read_size_hint = 4096,
      .connect_timeout =
          std::chrono::ceil<std::chrono::milliseconds>(std::chrono::nanoseconds(w_->timeout_ns())),
      // A client lives on its worker's loop: nothing else touches its pipes, so they take no lock.
      .input_one_thread = true,
      .output_one_thread = true};
  if (plan.tls_context != nullptr) {
    TlsConnectionOptions tls_options;
    tls_options.pool = &plan.pool;
    tls_options.input_one_thread = tls_options.output_one_thread = true;
    tls_options.handshake_timeout = options.connect_timeout;
    TlsConnection::Connect(w_->loop(), w_->spec().address, plan.tls_context, options, tls_options,
                           [this, generation](StatusOr<std::shared_ptr<TlsConnection>> c) {
                             if (!c.ok()) {
                               OnConnected(c.status(), generation);
                             } else {
                               OnConnected(MakeTlsTransport(std::move(*c)), generation);
                             }
                           });
    return;
  }
  SocketConnection::Connect(w_->loop(), w_->spec().address, options,
                            [this, generation](StatusOr<std::shared_ptr<SocketConnection>> c) {
                              if (!c.ok()) {
                                OnConnected(c.status(), generation);
                              } else {
                                OnConnected(MakeSocketTransport(std::move(*c)), generation);
                              }
                            });
}

void Client::OnConnected(StatusOr<std::unique_ptr<Transport>> connected, uint64_t generation) {
  Status status = connected.status();
  std::unique_ptr<Transport> transport;
  if (connected.ok()) transport = std::move(*connected);
  if (transport != nullptr && transport->secure()) {
    status = CheckAlpn(transport->alpn());
    if (!status.ok()) {
      transport->Close();
      transport = nullptr;
    }
  }
  if (generation != generation_ || w_->finished()) {
    // Abandoned while connecting.
    if (transport != nullptr) transport->Close();
    if (generation == generation_) state_ = State::kIdle;
    w_->ConnectEnded();
    return;
  }
  w_->ConnectEnded();
  const int64_t now = NowNs();
  if (!status.ok()) {
    state_ = State::kIdle;
    w_->CountError(&ErrorCounts::connect, status, now);
    if (w_->WantsToSend(*this)) {
      // Back off while the target refuses: 1 ms, doubling to 100 ms.
      const auto delay =
          std::chrono::milliseconds(std::min(100, 1 << std::min(connect_failures_, 7)));
      ++connect_failures_;
      w_->loop()->RunAfter(delay, [this, generation] {
        if (generation == generation_ && state_ == State::kIdle && w_->WantsToSend(*this)) {
          Connect();
        }
      });
    }
    w_->MaybeFinish(now);
    return;
  }
  connect_failures_ = 0;
  transport_ = std::move(transport);
  in_ = &transport_->input();
  out_ = &transport_->output();
  state_ = State::kOpen;
  // Connection setup (TCP, plus the TLS handshake) is kept apart from request latency.
  w_->RecordConnected(ever_connected_, std::max<int64_t>(1, now - connect_started_ns_),
                      transport_->secure());
  ever_connected_ = true;
  OnOpen();
  PumpInput();
  if (state_ == State::kOpen && generation == generation_) FillPipeline(now);
}

void Client::PumpInput() {
  const uint64_t generation = generation_;
  while (open() && generation == generation_) {
    ReadResult in;
    // 16 bytes of trivially copyable capture: the Callback keeps it in place, no allocation. The
    // result is taken by reference: the Callback passes it on as an rvalue, so no copy is made.
    auto on_ready = [this, generation](ReadResult&& later) {
      if (generation != generation_) return;
      if (OnRead(later)) PumpInput();
    };
    bool ready;
    if (advance_owed_) {
      // What the last OnInput consumed is freed by the same call that reads on.
      advance_owed_ = false;
      ready = In().AdvanceAndRead(advance_consumed_, advance_examined_, &in, on_ready);
    } else {
      ready = In().Read(&in, on_ready);
    }
    if (!ready) return;
    if (!OnRead(in)) return;
  }
}

bool Client::OnRead(ReadResult& in) {
  const int64_t now = NowNs();
  if (!in.is_completed && !in.status.ok()) {
    // Our own misuse of the pipe; never the server's doing.
    w_->CountError(&ErrorCounts::read, in.status, now);
    Drop(now);
    return false;
  }
  return OnInput(in, now);
}

void Client::OnInputEnded(const ReadResult& in, int64_t now, const char* what_was_lost) {
  if (!in.status.ok()) {
    const bool write = in.status.message().starts_with("sendmsg");
    w_->CountError(write ? &ErrorCounts::write : &ErrorCounts::read, in.status, now);
  } else if (in_flight() > 0) {
    w_->CountError(&ErrorCounts::read, UnavailableError(what_was_lost), now);
  }
  Drop(now);
}

void Client::FillPipeline(int64_t now) {
  if (!w_->WantsToSend(*this)) {
    // The last completion of a stopping worker ends its run.
    w_->MaybeFinish(now);
    return;
  }
  if (state_ != State::kOpen || flush_pending_) return;
  const size_t free = Sendable();
  if (free == 0) return;
  const int64_t measure_start = w_->plan().measure_start_ns;
  size_t count = free;
  uint64_t measured = 0;
  if (paced_) {
    count = 0;
    const int64_t due_until = std::min(now, w_->send_until_ns() - 1);
    while (count < free &&
           next_intended_ns_ + static_cast<int64_t>(count) * interval_ns_ <= due_until) {
      if (next_intended_ns_ + static_cast<int64_t>(count) * interval_ns_ >= measure_start) {
        ++measured;
      }
      ++count;
    }
    if (count == 0) {
      if (next_intended_ns_ < w_->send_until_ns()) w_->SchedulePacer(this, next_intended_ns_);
      return;
    }
  } else if (now >= measure_start) {
    measured = count;
  }
  if (measured > 0) {
    // Intended times ascend, so the measured requests are the last ones: trim those.
    const uint64_t granted = w_->ClaimTickets(measured);
    count -= static_cast<size_t>(measured - granted);
    measured = granted;
  }
  if (count == 0) {
    w_->MaybeFinish(now);
    return;
  }
  uint64_t sent_bytes_each = 0;
  if (Status s = WriteRequests(count, now, &sent_bytes_each); !s.ok()) {
    w_->CountError(&ErrorCounts::write, s, now);
    Drop(now);
    return;
  }
  if (paced_) next_intended_ns_ += static_cast<int64_t>(count) * interval_ns_;
  w_->RecordSent(count, measured, sent_bytes_each);
  if (!Flush()) return;
  if (paced_ && in_flight() < capacity_ && next_intended_ns_ < w_->send_until_ns()) {
    w_->SchedulePacer(this, next_intended_ns_);
  }
}

uint64_t Client::MeasuredBacklog(int64_t until) const {
  if (!paced_) return 0;
  // Request k of the backlog is intended at next_intended_ns_ + k * interval_ns_.
  const int64_t first = std::max(next_intended_ns_, w_->plan().measure_start_ns);
  if (first >= until) return 0;
  auto steps_before = [this](int64_t t) {  // requests intended before t
    return t <= next_intended_ns_ ? 0 : (t - next_intended_ns_ + interval_ns_ - 1) / interval_ns_;
  };
  return static_cast<uint64_t>(steps_before(until) - steps_before(first));
}

bool Client::Flush() {
  if (flush_pending_) return false;
  const uint64_t generation = generation_;
  FlushResult flushed;
  if (!Out().Flush(&flushed, [this, generation](FlushResult) {
        if (generation != generation_) return;
        flush_pending_ = false;
        FillPipeline(NowNs());
      })) {
    // The output is over its pause threshold: wait for the socket to take it.
    flush_pending_ = true;
    return false;
  }
  return true;
}

void Client::CheckTimeout(int64_t now) {
  const InFlight* late = Overdue(now);
  if (late == nullptr) return;
  if (late->measured) {
    w_->CountError(&ErrorCounts::timeout, DeadlineExceededError("request timed out"), now);
  }
  Drop(now);
}

void Client::CloseSocket() {
  ++generation_;
  advance_owed_ = false;  // the input it was for goes with the connection
  if (open()) {
    // Completing our input side first drops our pending read callback.
    In().Complete();
    transport_->Close();
    transport_ = nullptr;
    in_ = nullptr;
    out_ = nullptr;
  }
  OnClosed();
  if (state_ == State::kOpen) state_ = State::kIdle;
  flush_pending_ = false;
}

void Client::Drop(int64_t now) {
  FailInFlight();
  CloseSocket();
  if (w_->WantsToSend(*this)) {
    Connect();
  } else {
    w_->MaybeFinish(now);
  }
}

void Client::Abandon() {
  if (state_ == State::kConnecting && !ever_connected_ && !w_->all_requests_claimed()) {
    // A connection that never came up (a server that accepts and then stays silent through the
    // TLS handshake) would otherwise leave a run with nothing sent and nothing said. (Not when a
    // -n run ends because its requests are done: the others' connections were not needed.)
    w_->CountError(&ErrorCounts::connect,
                   DeadlineExceededError("connection still being set up when the run ended "
                                         "(TCP connect or TLS handshake pending)"),
                   NowNs());
  }
  w_->ForgetOutstanding(in_flight());
  CloseSocket();
}

}  // namespace sluice::loadgen
