// The HTTP/1.1 client of the load generator (loadgen/client.h): keep-alive with up to `pipeline`
// requests in flight, written as one copy of the request batch the run prepared, and every
// response buffered parsed in one pass (http1::ResponseParser; bodies by Content-Length
// countdown, ChunkedDecoder, or until the close) before the next requests go out.
//
//   std::unique_ptr<Client> c = std::make_unique<Http1Client>(&worker, index);
//   c->Connect();
//
// A server sends the same head again and again (the Date field changes once a second): a head
// whose bytes are those of the last one parsed on the connection is taken as that one (its
// status, framing, length and keep-alive), without parsing it again. The parser's outcome depends
// only on the bytes, so this is the answer it would give; any other head is parsed and checked
// in full.
//
// Closed loop, a connection writes a whole batch of `pipeline` requests once the previous batch
// is answered (wrk's pipelining: one writev per batch); at a constant rate, requests go out on
// schedule while fewer than `pipeline` are in flight. A response without keep-alive ends the
// connection once everything asked on it was answered.
//
// Thread contract: as Client (the worker's loop thread).
#ifndef SLUICE_LOADGEN_HTTP1_CLIENT_H_
#define SLUICE_LOADGEN_HTTP1_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/pipe.h"
#include "core/status.h"
#include "http1/chunked_decoder.h"
#include "http1/response_parser.h"
#include "loadgen/client.h"

namespace sluice::loadgen {

class Http1Client final : public Client {
 public:
  Http1Client(Worker* worker, int index);

  size_t in_flight() const override { return ring_size_; }
  uint64_t MeasuredInFlight() const override;

 private:
  enum class Body : uint8_t { kHead, kLength, kChunked, kUntilClose };

  Status CheckAlpn(std::string_view) const override { return OkStatus(); }
  void OnOpen() override {}
  bool OnInput(ReadResult& in, int64_t now) override;
  size_t Sendable() const override;
  Status WriteRequests(size_t count, int64_t now, uint64_t* bytes_each) override;
  const InFlight* Overdue(int64_t now) const override;
  void FailInFlight() override;
  void OnClosed() override;

  void CompleteResponse(int64_t now);
  InFlight PopInFlight();
  // Whether the bytes at `offset` start with last_head_ (they are the same head again).
  bool RepeatsLastHead(const BufferSequence& buffer, size_t offset);

  const size_t pipeline_;

  // Requests in flight, oldest first (a ring of `pipeline_` entries).
  std::vector<InFlight> ring_;
  size_t ring_head_ = 0;
  size_t ring_size_ = 0;
  // After a response without keep-alive: send nothing more on this connection.
  bool reusable_ = true;

  // The response being read.
  http1::ResponseParser parser_;
  http1::ResponseHead head_;
  http1::ChunkedDecoder chunked_;
  std::vector<std::span<const uint8_t>> chunk_data_;
  // The bytes of the last head parsed, if it was a final one of at most kMaxRememberedHead bytes
  // and head_ still holds what it gave; empty otherwise.
  std::string last_head_;
  std::vector<uint8_t> head_scratch_;  // a repeated head split across segments, for the compare
  // The parser holds part of a head from an earlier read (it resumes there).
  bool head_in_progress_ = false;
  Body body_ = Body::kHead;
  uint64_t body_left_ = 0;
  uint16_t status_ = 0;
  bool keep_alive_ = true;
};

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_HTTP1_CLIENT_H_
