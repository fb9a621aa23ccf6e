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
// A server that breaks the protocol ends the connection with INVALID_ARGUMENT, counted as a bad
// response, as HTTP/1.1's are; the message names the RFC 9113 error code. That covers a malformed
// response (§8.1.1: no :status, one that is not three digits in 100-599, DATA before the head, a
// second head that is not trailers, a 1xx ending the stream, DATA that disagrees with
// content-length, an uppercase field name), a frame on a stream we never opened (PROTOCOL_ERROR),
// HEADERS or DATA on a stream the server already ended (STREAM_CLOSED), a WINDOW_UPDATE or
// SETTINGS_INITIAL_WINDOW_SIZE that takes one of our send windows past 2^31-1
// (FLOW_CONTROL_ERROR), and any stream error the decoder finds on a stream of ours still open (the
// response on it cannot be trusted). An oversized header block is RESOURCE_EXHAUSTED.
//
// A response to HEAD, and a 204 or 304, carries no content whatever its content-length says:
// DATA with any payload on one is malformed.
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
  // The server's SETTINGS_MAX_CONCURRENT_STREAMS is 0 and none of our streams is open: nothing
  // can be sent, and no answer is pending that would bring the connection back to life. Only
  // another SETTINGS from the server can raise the limit (RFC 9113 §5.1.2 asks servers to keep a
  // zero short); the client bounds the wait (Http2Client).
  bool stalled_by_peer_limit() const {
    return peer_max_streams_ == 0 && open_streams_ == 0 && !goaway_;
  }
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
  struct OpenStream {
    uint32_t id;
    uint16_t status;   // 0 until the response head arrived
    uint8_t interim;   // interim (1xx) heads before the final one
    bool body_known;   // body_left bounds the content (content-length, or none for HEAD/204/304)
    uint32_t unacked;  // DATA not yet returned in a WINDOW_UPDATE
    uint64_t body_left;
    // What we may still send on the stream; tracked only to refuse a window past 2^31-1.
    http2::SendWindow window;
  };

  [[nodiscard]] Status OnFrame(const http2::Frame& frame, std::string* out, Listener* listener);
  // Whether a frame of `type` may name stream `id` (not 0), RFC 9113 §5.1: sets *open to our
  // stream of that id if it is open, else null. Returns the fault that ends the connection:
  // anything on a stream we never opened (an even id, as push is off, or an odd id we have not
  // used yet: idle), HEADERS or DATA on one the server already ended.
  [[nodiscard]] Status CheckStream(uint8_t type, uint32_t id, OpenStream** open);
  // The response on `stream` ended (END_STREAM): reported to `listener` unless its content fell
  // short of its content-length, which is returned as the fault.
  [[nodiscard]] Status EndResponse(OpenStream& stream, Listener* listener);
  // Our open stream `id`, or null.
  OpenStream* Find(uint32_t id);

  const Options options_;
  const std::vector<std::pair<std::string, std::string>> fields_;
  const std::string body_;
  // The request is a HEAD: its responses carry no content.
  const bool head_request_;
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
  // What we may still send on the connection, and the server's SETTINGS_INITIAL_WINDOW_SIZE
  // (stream send windows start there).
  http2::SendWindow send_window_;
  int64_t peer_initial_window_ = http2::kDefaultInitialWindowSize;
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
  // The block's content-length (block_length_seen_), or that it was not one number, or two
  // different ones (block_length_bad_).
  uint64_t block_length_ = 0;
  bool block_length_seen_ = false;
  bool block_length_bad_ = false;
  // A field name with an uppercase letter (RFC 9113 §8.2.1), and the name, for the error.
  bool block_name_bad_ = false;
  std::string block_name_text_;
  // The block's frame bytes, and its decoded header list's size as RFC 7541 counts it (name,
  // value and 32 per field): both bounded, as an HTTP/1.1 head is.
  size_t block_frame_bytes_ = 0;
  size_t block_list_bytes_ = 0;
  // Removes one of streams_ (the last one takes its place).
  void Remove(OpenStream* stream);

  // Open streams (small: at most max_streams entries; searched linearly).
  std::vector<OpenStream> streams_;
  bool seen_input_ = false;  // the server's first bytes were checked
  bool goaway_ = false;
  uint32_t goaway_last_stream_id_ = http2::kMaxStreamId;
  uint64_t data_bytes_ = 0;
};

}  // namespace sluice::loadgen

#endif  // SLUICE_LOADGEN_H2_SESSION_H_
