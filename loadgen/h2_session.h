// The client side of one HTTP/2 connection for the load generator, without I/O: it turns
// requests into frames and the server's frames into completions. It reuses sluice's HTTP/2 codec
// (http2/frame.h, http2/hpack.h), the same code the server runs.
//
//   H2Session session(options, request_fields, body);
//   std::string out;
//   session.Start(&out);                        // preface, SETTINGS, connection WINDOW_UPDATE
//   uint32_t id = session.SendRequest(&out);    // HEADERS (+ DATA); while CanSend()
//   ... write `out` ...
//   size_t used = 0;
//   Status s = session.OnInput(bytes, &used, &out, &listener);  // completions via listener
//
// Flow control: we grant large windows (1 GiB per stream and for the connection, like h2load's
// defaults) and return consumed DATA in WINDOW_UPDATEs batched at half a window; request bodies
// must fit the server's initial stream window (ValidateSpec limits them to 16 KiB).
//
// A malformed response (RFC 9113 §8.1.1: no :status, one that is not three digits in 100-599,
// DATA before the head, a second head that is not trailers, a 1xx ending the stream) ends the
// connection with INVALID_ARGUMENT, counted as a bad response, as HTTP/1.1's are; an oversized
// header block, RESOURCE_EXHAUSTED.
//
// Thread contract: thread-compatible (one connection's loop).
#ifndef SLUICE_LOADGEN_H2_SESSION_H_
#define SLUICE_LOADGEN_H2_SESSION_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/pipe.h"
#include "core/status.h"
#include "http2/flow_control.h"
#include "http2/frame.h"
#include "http2/hpack.h"

namespace sluice::loadgen {

class H2Session {
 public:
  class Listener {
   public:
    virtual ~Listener() = default;
    // A response ended (END_STREAM) with `status` (0 if the server sent no :status).
    virtual void OnResponse(uint32_t stream_id, uint16_t status) = 0;
    // The server reset the stream (RST_STREAM), or refused it.
    virtual void OnStreamReset(uint32_t stream_id, http2::ErrorCode code) = 0;
  };

  // Bounds on what a response may send, as the HTTP/1.1 client's (http1::ResponseParser): a
  // header block's frame bytes and its decoded header list, and interim (1xx) heads per stream.
  static constexpr size_t kMaxHeaderBlockBytes = 64 * 1024;
  static constexpr uint8_t kMaxInterimHeads = 16;

  struct Options {
    // Concurrent streams we open at most (the server's SETTINGS may lower it).
    uint32_t max_streams = 100;
    // Our windows (stream and connection).
    uint32_t window = 1u << 30;
  };

  // `fields`: the request's header list (":method", ":scheme", ":authority", ":path", then the
  // regular fields, lowercase). `body`: sent as DATA after the headers (may be empty).
  H2Session(const Options& options, std::vector<std::pair<std::string, std::string>> fields,
            std::string body);

  // The connection preface and our SETTINGS, appended to *out.
  void Start(std::string* out);
  // Whether another stream may open now.
  bool CanSend() const {
    return open_streams_ < std::min(options_.max_streams, peer_max_streams_) && !goaway_;
  }
  uint32_t open_streams() const { return open_streams_; }
  // Streams that may open now.
  size_t sendable() const {
    const uint32_t limit = std::min(options_.max_streams, peer_max_streams_);
    return goaway_ || open_streams_ >= limit ? 0 : limit - open_streams_;
  }
  // The id the next SendRequest uses.
  uint32_t next_stream_id() const { return next_stream_id_; }
  // Appends one request's frames; returns its stream id (0 if the ids ran out: reconnect).
  uint32_t SendRequest(std::string* out);

  // Decodes the frames at the start of `in` (from `offset`), reporting completions to
  // `listener` and appending what we owe the server (SETTINGS ACK, PING ACK, WINDOW_UPDATE) to
  // *out. Sets *consumed to the bytes used (whole frames). Returns OK, or why the connection
  // must end (a connection error from the server's GOAWAY, malformed frames, HPACK errors):
  // streams still open then fail.
  [[nodiscard]] Status OnInput(const BufferSequence& in, size_t offset, size_t* consumed,
                               std::string* out, Listener* listener);

  // GOAWAY seen: no new streams; those above goaway_last_stream_id() will not be answered.
  bool goaway() const { return goaway_; }
  uint32_t goaway_last_stream_id() const { return goaway_last_stream_id_; }
  // DATA payload bytes received.
  uint64_t data_bytes() const { return data_bytes_; }

 private:
  [[nodiscard]] Status OnFrame(const http2::Frame& frame, std::string* out, Listener* listener);
  void EndStream(uint32_t id, Listener* listener);

  const Options options_;
  const std::vector<std::pair<std::string, std::string>> fields_;
  const std::string body_;
  http2::HpackEncoder encoder_;
  http2::HpackDecoder decoder_;
  std::vector<http2::HeaderField> field_views_;
  // The last two header blocks: once equal, the block is reused without encoding (every field
  // is then indexed, and indexed fields do not change the dynamic table).
  std::string block_;
  bool block_stable_ = false;
  std::string scratch_;
  std::vector<uint8_t> frame_scratch_;
  http2::Frame frame_;
  http2::ReceiveWindow connection_window_;
  uint32_t next_stream_id_ = 1;
  uint32_t open_streams_ = 0;
  uint32_t peer_max_streams_ = 100;
  uint32_t peer_max_frame_size_ = http2::kMinMaxFrameSize;
  uint32_t max_frame_size_ = http2::kMinMaxFrameSize;
  // The stream whose header block is being decoded (HEADERS then CONTINUATIONs), and its status.
  uint32_t block_stream_ = 0;
  bool block_end_stream_ = false;
  uint16_t block_status_ = 0;
  // The block's :status was not three digits in 100-599, or came twice (its text, for the error).
  bool block_status_bad_ = false;
  std::string block_status_text_;
  // The block's frame bytes, and its decoded header list's size as RFC 7541 counts it (name,
  // value and 32 per field): both bounded, as an HTTP/1.1 head is.
  size_t block_frame_bytes_ = 0;
  size_t block_list_bytes_ = 0;
  struct OpenStream {
    uint32_t id;
    uint16_t status;   // 0 until the response head arrived
    uint32_t unacked;  // DATA not yet returned in a WINDOW_UPDATE
    uint8_t interim;   // interim (1xx) heads before the final one
  };
  // Removes `id` from streams_; false if it is not open.
  bool Close(uint32_t id, uint16_t* status);

  // Open streams (small: at most max_streams entries; searched linearly).
  std::vector<OpenStream> streams_;
  bool seen_input_ = false;  // the server's first bytes were checked
  bool goaway_ = false;
  uint32_t goaway_last_stream_id_ = http2::kMaxStreamId;
  uint64_t data_bytes_ = 0;
};

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_H2_SESSION_H_
