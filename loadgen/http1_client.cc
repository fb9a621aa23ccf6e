#include "loadgen/http1_client.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <string>

#include "loadgen/worker.h"

namespace sluice::loadgen {
namespace {

// Heads longer than this are parsed every time (a server's usual head is 100 to 300 bytes).
constexpr size_t kMaxRememberedHead = 1024;
// Request batches up to this size are copied straight into the output's block (GetSpan), at the
// cost of at most this much of a block left unused; larger ones go through PipeWriter::Write.
constexpr size_t kMaxDirectWrite = 1024;

}  // namespace

Http1Client::Http1Client(Worker* worker, int index)
    : Client(worker, index, static_cast<size_t>(worker->spec().pipeline)),
      pipeline_(static_cast<size_t>(worker->spec().pipeline)),
      ring_(pipeline_),
      // A client reads what servers send: no body-size or trailer policy to enforce.
      chunked_(http1::ChunkedLimits{.max_body_bytes = UINT64_MAX}) {}

uint64_t Http1Client::MeasuredInFlight() const {
  uint64_t n = 0;
  for (size_t i = 0; i < ring_size_; ++i) n += ring_[(ring_head_ + i) % pipeline_].measured;
  return n;
}

size_t Http1Client::Sendable() const {
  if (!reusable_) return 0;
  // Closed loop: the next batch once the previous one is answered, so a connection costs one
  // writev per `pipeline_` requests rather than one per read.
  if (!paced() && ring_size_ > 0) return 0;
  return pipeline_ - ring_size_;
}

Status Http1Client::WriteRequests(size_t count, int64_t now, uint64_t* bytes_each) {
  const RunPlan& plan = w_->plan();
  *bytes_each = plan.request_size;
  const size_t bytes = count * plan.request_size;
  PipeWriter& out = Out();
  // A small batch goes into the output's current block (or a new one) in one copy; a larger one,
  // or a completed output (an empty span), through Write.
  const std::span<uint8_t> span =
      bytes <= kMaxDirectWrite ? out.GetSpan(bytes) : std::span<uint8_t>();
  if (span.size() >= bytes) {
    std::memcpy(span.data(), plan.request_batch.data(), bytes);
    out.Advance(bytes).IgnoreError();  // within the span of an open output: cannot fail
  } else if (Status s = out.Write(std::string_view(plan.request_batch).substr(0, bytes)); !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < count; ++i) {
    const int64_t intended = IntendedTime(i, now);
    size_t slot = ring_head_ + ring_size_;
    if (slot >= pipeline_) slot -= pipeline_;
    ring_[slot] = InFlight{intended, now, intended >= plan.measure_start_ns};
    ++ring_size_;
  }
  return OkStatus();
}

bool Http1Client::OnInput(ReadResult& in, int64_t now) {
  const uint64_t generation = this->generation();
  const BufferSequence& buffer = in.buffer;
  size_t offset = 0;
  Status bad;
  // Parse everything buffered before sending anything: one flush per pass.
  while (reusable_) {
    if (body_ == Body::kHead) {
      if (offset == buffer.size()) break;
      if (ring_size_ == 0) {
        bad = InvalidArgumentError("response without a request");
        break;
      }
      if (!head_in_progress_ && RepeatsLastHead(buffer, offset)) {
        offset += last_head_.size();  // head_ holds what these bytes gave last time
      } else {
        last_head_.clear();  // head_ is about to change
        const http1::ResponseParseOutcome r =
            parser_.Parse(buffer, offset, w_->plan().head_request, &head_);
        head_in_progress_ = r.incomplete();
        if (r.incomplete()) break;
        if (r.error()) {
          bad = r.ToStatus();
          break;
        }
        if (r.interim_responses > 0) {
          w_->RecordInterim(r.interim_responses, now);
        } else if (r.consumed <= kMaxRememberedHead) {
          last_head_.resize(r.consumed);
          buffer.CopyTo(
              offset, std::span(reinterpret_cast<uint8_t*>(last_head_.data()), last_head_.size()));
        }
        offset += r.consumed;
      }
      if (head_.status_code == 101) {
        bad = InvalidArgumentError("unexpected 101 Switching Protocols");
        break;
      }
      status_ = head_.status_code;
      keep_alive_ = head_.keep_alive;
      switch (head_.framing) {
        case http1::ResponseFraming::kNone:
          CompleteResponse(now);
          break;
        case http1::ResponseFraming::kContentLength:
          if (head_.content_length == 0) {
            CompleteResponse(now);
          } else {
            body_ = Body::kLength;
            body_left_ = head_.content_length;
          }
          break;
        case http1::ResponseFraming::kChunked:
          chunked_.Reset();
          body_ = Body::kChunked;
          break;
        case http1::ResponseFraming::kUntilClose:
          body_ = Body::kUntilClose;
          break;
      }
    } else if (body_ == Body::kLength) {
      const uint64_t n = std::min<uint64_t>(body_left_, buffer.size() - offset);
      offset += static_cast<size_t>(n);
      body_left_ -= n;
      if (body_left_ > 0) break;
      body_ = Body::kHead;
      CompleteResponse(now);
    } else if (body_ == Body::kChunked) {
      chunk_data_.clear();  // the data itself is not needed; the vector keeps its capacity
      const http1::ChunkedOutcome c = chunked_.Decode(buffer, offset, &chunk_data_);
      offset += c.consumed;
      if (c.error()) {
        bad = InvalidArgumentError("bad chunked body: " + std::string(c.reason));
        break;
      }
      if (!c.done()) break;
      body_ = Body::kHead;
      CompleteResponse(now);
    } else {  // kUntilClose: everything up to the end
      offset = buffer.size();
      break;
    }
  }
  w_->RecordRead(offset, now);
  // Examined everything: the next read waits for new bytes.
  AdvanceInput(offset, buffer.size());
  if (!bad.ok()) {
    w_->CountError(&ErrorCounts::bad_response, bad, now);
    Drop(now);
    return false;
  }
  if (in.is_completed) {
    if (body_ == Body::kUntilClose && in.status.ok()) {
      body_ = Body::kHead;
      CompleteResponse(now);
    }
    OnInputEnded(in, now, "server closed the connection with requests in flight");
    return false;
  }
  if (!reusable_ && ring_size_ == 0) {
    // The server announced the close and everything asked was answered: move on at once.
    Drop(now);
    return false;
  }
  FillPipeline(now);
  return generation == this->generation();
}

bool Http1Client::RepeatsLastHead(const BufferSequence& buffer, size_t offset) {
  const size_t n = last_head_.size();
  if (n == 0 || buffer.size() - offset < n) return false;
  // The head is usually within the first chunk: compared in place, without Contiguous's walk.
  const std::span<const uint8_t> first = buffer.FirstSpan();
  const std::span<const uint8_t> bytes = offset + n <= first.size()
                                             ? first.subspan(offset, n)
                                             : buffer.Contiguous(offset, n, &head_scratch_);
  return std::memcmp(bytes.data(), last_head_.data(), n) == 0;
}

Client::InFlight Http1Client::PopInFlight() {
  const InFlight f = ring_[ring_head_];
  ring_head_ = ring_head_ + 1 == pipeline_ ? 0 : ring_head_ + 1;
  --ring_size_;
  return f;
}

void Http1Client::CompleteResponse(int64_t now) {
  const InFlight f = PopInFlight();
  w_->RecordCompletion(f.intended_ns, f.sent_ns, f.measured, status_, now);
  if (!keep_alive_) reusable_ = false;
}

const Client::InFlight* Http1Client::Overdue(int64_t now) const {
  // The oldest request is the first to time out.
  if (ring_size_ == 0 || now - ring_[ring_head_].sent_ns < w_->timeout_ns()) return nullptr;
  return &ring_[ring_head_];
}

void Http1Client::FailInFlight() {
  while (ring_size_ > 0) w_->RecordFailure(PopInFlight().measured);
}

void Http1Client::OnClosed() {
  ring_head_ = ring_size_ = 0;
  parser_.Reset();
  head_in_progress_ = false;
  last_head_.clear();
  body_ = Body::kHead;
  reusable_ = true;
}

}  // namespace sluice::loadgen
