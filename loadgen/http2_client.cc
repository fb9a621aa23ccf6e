#include "loadgen/http2_client.h"

#include <chrono>
#include <string>
#include <utility>

#include "loadgen/worker.h"

namespace sluice::loadgen {

Http2Client::Http2Client(Worker* worker, int index)
    : Client(worker, index, static_cast<size_t>(worker->spec().max_streams)) {}

uint64_t Http2Client::MeasuredInFlight() const {
  uint64_t n = 0;
  for (const StreamSlot& slot : slots_) n += slot.id != 0 && slot.f.measured;
  return n;
}

Status Http2Client::CheckAlpn(std::string_view alpn) const {
  if (alpn != "h2") return UnavailableError("the server did not negotiate h2 (ALPN)");
  return OkStatus();
}

void Http2Client::OnOpen() {
  owed_while_waiting_ = 0;
  const LoadSpec& spec = w_->spec();
  H2Session::Options options;
  options.max_streams = static_cast<uint32_t>(spec.max_streams);
  session_ = std::make_unique<H2Session>(options, w_->plan().h2_fields, spec.body);
  size_t table = 4;
  while (table < 4 * static_cast<size_t>(spec.max_streams)) table *= 2;
  slots_.assign(table, StreamSlot{});
  in_flight_ = 0;
  out_.clear();
  // The preface goes out with the first requests, or with the first frames we owe.
  session_->Start(&out_);
}

size_t Http2Client::Sendable() const {
  // Every pass refills the streams that ended, as far as the session and the slots allow.
  const size_t allowed = session_->sendable();
  const uint32_t next = session_->next_stream_id();
  size_t free = 0;
  while (free < allowed && slots_[SlotOf(next + 2 * static_cast<uint32_t>(free))].id == 0) {
    ++free;
  }
  return free;
}

Status Http2Client::WriteRequests(size_t count, int64_t now, uint64_t* bytes_each) {
  owed_while_waiting_ = 0;  // requests go out only while no flush waits
  const int64_t measure_start = w_->plan().measure_start_ns;
  const size_t before = out_.size();  // control frames (and the preface) come first
  const uint32_t first_id = session_->next_stream_id();  // the batch's ids: first_id + 2 i
  for (size_t i = 0; i < count; ++i) {
    const int64_t intended = IntendedTime(i, now);
    const uint32_t id = session_->SendRequest(&out_);
    slots_[SlotOf(id)] = StreamSlot{id, InFlight{intended, now, intended >= measure_start}};
    ++in_flight_;
  }
  *bytes_each = (out_.size() - before) / count;
  const Status s = Out().Write(out_);
  out_.clear();
  if (!s.ok()) {
    // None of the batch went out, and none of it was counted as sent: the drop that follows
    // must not fail these streams (that would count failures of requests never sent).
    for (size_t i = 0; i < count; ++i) {
      slots_[SlotOf(first_id + 2 * static_cast<uint32_t>(i))] = StreamSlot{};
    }
    in_flight_ -= count;
  }
  return s;
}

bool Http2Client::FlushOutput() {
  if (!out_.empty()) {
    // Frames we owe the server (SETTINGS and PING ACKs, WINDOW_UPDATEs). While the server does
    // not read, they pile up in the output: one that keeps sending PINGs it never reads the ACKs
    // of would grow it without end. Past a bound the connection ends, as a flood.
    owed_while_waiting_ = output_waiting() ? owed_while_waiting_ + out_.size() : 0;
    if (owed_while_waiting_ > kMaxOwedWhileWaiting) {
      out_.clear();
      Fail(ResourceExhaustedError("HTTP/2: the server sends frames that need answers "
                                  "(PING, SETTINGS) and does not read the answers"),
           NowNs());
      return false;
    }
    const Status s = Out().Write(out_);
    out_.clear();
    if (!s.ok()) {
      w_->CountError(&ErrorCounts::write, s, NowNs());
      Drop(NowNs());
      return false;
    }
  }
  return Flush();
}

bool Http2Client::OnInput(ReadResult& in, int64_t now) {
  const uint64_t generation = this->generation();
  size_t consumed = 0;
  input_now_ = now;
  const Status s = session_->OnInput(in.buffer, 0, &consumed, &out_, this);
  if (generation != this->generation()) return false;
  w_->RecordRead(consumed, now);
  AdvanceInput(consumed, in.buffer.size());
  if (!s.ok()) {
    Fail(s, now);
    return false;
  }
  if (in.is_completed) {
    OnInputEnded(in, now, "server closed the connection with streams in flight");
    return false;
  }
  if (session_->goaway()) {
    // The server stops taking streams: those above its last stream id will never be answered.
    const size_t before = in_flight_;
    FailStreams(session_->goaway_last_stream_id());
    if (in_flight_ < before) {
      w_->CountError(&ErrorCounts::read,
                     UnavailableError("GOAWAY: streams above the last stream id not served"), now);
    }
    if (in_flight_ == 0) {
      (void)FlushOutput();
      if (generation == this->generation()) Drop(now);
      return false;
    }
  }
  FillPipeline(now);
  if (generation != this->generation()) return false;
  WatchStall();
  if (!out_.empty()) (void)FlushOutput();
  return generation == this->generation();
}

void Http2Client::Fail(const Status& why, int64_t now) {
  w_->CountError(
      why.code() == StatusCode::kUnavailable ? &ErrorCounts::read : &ErrorCounts::bad_response, why,
      now);
  Drop(now);
}

void Http2Client::WatchStall() {
  // Only input changes the answer (a SETTINGS, a stream ending), so this runs after each read.
  const bool stalled = session_->stalled_by_peer_limit();
  if (stalled == (stall_timer_ != 0)) return;
  if (!stalled) {
    w_->loop()->CancelTimer(stall_timer_);
    stall_timer_ = 0;
    return;
  }
  const uint64_t generation = this->generation();
  stall_timer_ =
      w_->loop()->RunAfter(std::chrono::nanoseconds(w_->timeout_ns()), [this, generation] {
        // A closed connection cancelled the timer; the generation guards a late call anyway.
        if (generation != this->generation()) return;
        stall_timer_ = 0;
        // Nothing left for this connection to send (the drain, or a -n run whose requests are
        // all claimed): the server's limit keeps nothing from going out.
        if (w_->finished() || !w_->WantsToSend(*this) || !session_->stalled_by_peer_limit()) {
          return;
        }
        Fail(ResourceExhaustedError("HTTP/2: the server's SETTINGS_MAX_CONCURRENT_STREAMS stayed "
                                    "0 for the request timeout with none of our streams open: "
                                    "no request could be sent"),
             NowNs());
      });
}

void Http2Client::OnResponse(uint32_t id, uint16_t status) {
  StreamSlot& slot = slots_[SlotOf(id)];
  if (slot.id != id) return;
  slot.id = 0;
  --in_flight_;
  w_->RecordCompletion(slot.f.intended_ns, slot.f.sent_ns, slot.f.measured, status, input_now_);
}

void Http2Client::OnStreamReset(uint32_t id, http2::ErrorCode code) {
  StreamSlot& slot = slots_[SlotOf(id)];
  if (slot.id != id) return;
  slot.id = 0;
  --in_flight_;
  if (slot.f.measured) {
    w_->CountError(
        &ErrorCounts::read,
        UnavailableError("stream reset by the server: " + std::string(http2::ErrorCodeName(code))),
        input_now_);
  }
  w_->RecordFailure(slot.f.measured);
}

void Http2Client::FailStreams(uint32_t above_id) {
  for (StreamSlot& slot : slots_) {
    if (slot.id == 0 || slot.id <= above_id) continue;
    slot.id = 0;
    --in_flight_;
    w_->RecordFailure(slot.f.measured);
  }
}

const Client::InFlight* Http2Client::Overdue(int64_t now) const {
  for (const StreamSlot& slot : slots_) {
    if (slot.id != 0 && now - slot.f.sent_ns >= w_->timeout_ns()) return &slot.f;
  }
  return nullptr;
}

void Http2Client::OnClosed() {
  if (stall_timer_ != 0) {
    w_->loop()->CancelTimer(stall_timer_);
    stall_timer_ = 0;
  }
  session_.reset();
  out_.clear();
  slots_.clear();
  in_flight_ = 0;
}

}  // namespace sluice::loadgen
