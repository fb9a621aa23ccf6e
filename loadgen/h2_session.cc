#include "loadgen/h2_session.h"

#include <algorithm>
#include <charconv>

#include "core/ascii.h"

namespace sluice::loadgen {

using http2::DecodeResult;
using http2::ErrorCode;
using http2::Frame;
using http2::FrameType;

namespace {

// How every fault of the server's leaves the session: INVALID_ARGUMENT, which the client counts as
// a bad response before it ends the connection, saying what was wrong and the RFC 9113 error code
// it carries. Built only on the way out, so the checks themselves stay plain branches.
Status ServerFault(ErrorCode code, std::string_view what) {
  std::string message = "HTTP/2: ";
  message.append(what).append(" (").append(http2::ErrorCodeName(code)).append(")");
  return InvalidArgumentError(message);
}

std::string OnStream(std::string_view what, uint32_t id) {
  return std::string(what) + " on stream " + std::to_string(id);
}

// 1*DIGIT, as a number; false for anything else (an empty value, a list such as "5, 5") or more
// than 64 bits.
bool ParseContentLength(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

bool IsHead(const std::vector<std::pair<std::string, std::string>>& fields) {
  for (const auto& [name, value] : fields) {
    if (name == ":method") return value == "HEAD";
  }
  return false;
}

}  // namespace

H2Session::H2Session(const Options& options,
                     std::vector<std::pair<std::string, std::string>> fields, std::string body)
    : options_(options),
      fields_(std::move(fields)),
      body_(std::move(body)),
      head_request_(IsHead(fields_)),
      // Start() grants the whole window at once (WINDOW_UPDATE after SETTINGS).
      connection_window_(std::max(options.window, http2::kDefaultInitialWindowSize)) {
  for (const auto& [name, value] : fields_) field_views_.push_back({name, value});
}

void H2Session::Start(std::string* out) {
  out->append(http2::kClientPreface);
  const http2::Setting settings[] = {
      {static_cast<uint16_t>(http2::SettingId::kEnablePush), 0},
      {static_cast<uint16_t>(http2::SettingId::kInitialWindowSize), options_.window},
      {static_cast<uint16_t>(http2::SettingId::kMaxConcurrentStreams), options_.max_streams},
  };
  http2::AppendSettings(settings, out);
  if (options_.window > http2::kDefaultInitialWindowSize) {
    http2::AppendWindowUpdate(0, options_.window - http2::kDefaultInitialWindowSize, out);
  }
}

uint32_t H2Session::SendRequest(std::string* out) {
  if (next_stream_id_ > http2::kMaxStreamId) return 0;
  const uint32_t id = next_stream_id_;
  next_stream_id_ += 2;
  if (!block_stable_) {
    scratch_.clear();
    // The encoder fails only when out of memory: an empty block then gets the stream reset.
    (void)encoder_.Encode(field_views_, &scratch_);
    block_stable_ = scratch_ == block_;
    block_.swap(scratch_);
  }
  const std::span<const uint8_t> block(reinterpret_cast<const uint8_t*>(block_.data()),
                                       block_.size());
  http2::AppendHeaders(id, block, body_.empty(), peer_max_frame_size_, out);
  std::span<const uint8_t> body(reinterpret_cast<const uint8_t*>(body_.data()), body_.size());
  while (!body.empty()) {
    const size_t n = std::min<size_t>(body.size(), peer_max_frame_size_);
    http2::AppendData(id, body.first(n), n == body.size(), out);
    body = body.subspan(n);
  }
  ++open_streams_;
  const auto sent = static_cast<uint32_t>(body_.size());
  send_window_.Consume(sent);
  streams_.push_back({.id = id,
                      .status = 0,
                      .interim = 0,
                      .body_known = false,
                      .unacked = 0,
                      .body_left = 0,
                      .window = http2::SendWindow(peer_initial_window_ - sent)});
  return id;
}

Status H2Session::OnInput(const BufferSequence& in, size_t offset, size_t* consumed,
                          std::string* out, Listener* listener) {
  const size_t start = offset;
  if (!seen_input_ && in.size() - offset >= 5) {
    seen_input_ = true;
    char head[5];
    in.CopyTo(offset, std::span<uint8_t>(reinterpret_cast<uint8_t*>(head), sizeof(head)));
    if (std::string_view(head, sizeof(head)) == "HTTP/") {
      *consumed = 0;
      return InvalidArgumentError(
          "HTTP/2: the server answered in HTTP/1.x (no h2c by prior knowledge on this port)");
    }
  }
  while (in.size() - offset >= http2::kFrameHeaderSize) {
    uint8_t header[http2::kFrameHeaderSize];
    in.CopyTo(offset, header);
    const uint32_t length = http2::ReadFrameHeader(header).length;
    if (length > max_frame_size_) {
      *consumed = offset - start;
      return ServerFault(ErrorCode::kFrameSizeError,
                         "frame larger than our SETTINGS_MAX_FRAME_SIZE");
    }
    if (in.size() - offset < http2::kFrameHeaderSize + length) break;
    std::span<const uint8_t> bytes =
        in.Contiguous(offset, http2::kFrameHeaderSize + length, &frame_scratch_);
    size_t used = 0;
    http2::DecodeStatus d = http2::DecodeFrame(bytes, max_frame_size_, &frame_, &used);
    offset += http2::kFrameHeaderSize + length;
    if (d.result == DecodeResult::kError) {
      if (d.error.is_connection_error()) {
        *consumed = offset - start;
        return ServerFault(d.error.code(), d.error.debug());
      }
      // A malformed frame on one stream. Where the stream stands decides: a frame that should not
      // name it at all, or a stream of ours still open (its response cannot be trusted), ends the
      // connection; on a stream that already ended (counted once) the RST_STREAM suffices. A
      // header block must not be cut into by it either.
      const uint32_t stream_id = d.error.stream_id();
      OpenStream* open = nullptr;
      Status fault;
      if (block_stream_ != 0) {
        fault = ServerFault(ErrorCode::kProtocolError, "CONTINUATION expected");
      } else if (frame_.type() == FrameType::kPriority) {
        open = Find(stream_id);  // PRIORITY may name a stream in any state
      } else {
        fault = CheckStream(frame_.header.type, stream_id, &open);
      }
      if (fault.ok() && open != nullptr) {
        fault = ServerFault(d.error.code(), OnStream(d.error.debug(), stream_id));
      }
      if (!fault.ok()) {
        *consumed = offset - start;
        return fault;
      }
      http2::AppendRstStream(stream_id, d.error.code(), out);
      continue;
    }
    if (Status s = OnFrame(frame_, out, listener); !s.ok()) {
      *consumed = offset - start;
      return s;
    }
  }
  *consumed = offset - start;
  return OkStatus();
}

Status H2Session::OnFrame(const Frame& frame, std::string* out, Listener* listener) {
  const uint32_t id = frame.header.stream_id;
  if (block_stream_ != 0 && frame.type() != FrameType::kContinuation) {
    return ServerFault(ErrorCode::kProtocolError, "CONTINUATION expected");
  }
  OpenStream* open = nullptr;
  switch (frame.type()) {
    case FrameType::kSettings:
      if (frame.has_flag(http2::flags::kAck)) return OkStatus();
      for (const http2::Setting& s : frame.settings) {
        switch (static_cast<http2::SettingId>(s.id)) {
          case http2::SettingId::kMaxConcurrentStreams:
            peer_max_streams_ = s.value;
            break;
          case http2::SettingId::kMaxFrameSize:
            peer_max_frame_size_ = s.value;
            break;
          case http2::SettingId::kHeaderTableSize:
            if (Status st = encoder_.SetPeerTableSize(s.value); !st.ok()) return st;
            block_stable_ = false;
            block_.clear();
            break;
          case http2::SettingId::kInitialWindowSize: {
            // Every open stream's send window moves by the change (RFC 9113 §6.9.2); past
            // 2^31-1 is the connection's FLOW_CONTROL_ERROR. The decoder bounded the value.
            const int64_t delta = static_cast<int64_t>(s.value) - peer_initial_window_;
            for (OpenStream& o : streams_) {
              if (!o.window.Shift(delta)) {
                return ServerFault(ErrorCode::kFlowControlError,
                                   OnStream("SETTINGS_INITIAL_WINDOW_SIZE takes the send window "
                                            "past 2^31-1",
                                            o.id));
              }
            }
            peer_initial_window_ = s.value;
            break;
          }
          default:
            break;
        }
      }
      http2::AppendSettingsAck(out);
      return OkStatus();
    case FrameType::kPing:
      if (!frame.has_flag(http2::flags::kAck)) http2::AppendPing(frame.ping_data, true, out);
      return OkStatus();
    case FrameType::kGoaway:
      goaway_ = true;
      goaway_last_stream_id_ = frame.last_stream_id;
      if (frame.error_code != ErrorCode::kNoError) {
        return UnavailableError(
            "HTTP/2: GOAWAY " + std::string(http2::ErrorCodeName(frame.error_code)) + " \"" +
            std::string(reinterpret_cast<const char*>(frame.debug_data.data()),
                        frame.debug_data.size()) +
            "\"");
      }
      return OkStatus();
    case FrameType::kRstStream: {
      // On a stream that already ended (the server may reset one after its response), nothing.
      if (Status s = CheckStream(frame.header.type, id, &open); !s.ok()) return s;
      if (open != nullptr) {
        Remove(open);
        listener->OnStreamReset(id, frame.error_code);
      }
      return OkStatus();
    }
    case FrameType::kWindowUpdate:
      // Our bodies go out whole with the request, so the windows only need to stay within 2^31-1
      // (RFC 9113 §6.9.1). A zero increment never gets here: the decoder refuses it.
      if (id == 0) {
        if (!send_window_.Grow(frame.window_increment)) {
          return ServerFault(ErrorCode::kFlowControlError,
                             "WINDOW_UPDATE takes the connection's send window past 2^31-1");
        }
        return OkStatus();
      }
      if (Status s = CheckStream(frame.header.type, id, &open); !s.ok()) return s;
      if (open != nullptr && !open->window.Grow(frame.window_increment)) {
        return ServerFault(ErrorCode::kFlowControlError,
                           OnStream("WINDOW_UPDATE takes the send window past 2^31-1", id));
      }
      return OkStatus();
    case FrameType::kHeaders:
      // Checked before the block is decoded: a fault here ends the connection, so the HPACK
      // state that skipping the block would break is not used again.
      if (Status s = CheckStream(frame.header.type, id, &open); !s.ok()) return s;
      block_stream_ = id;
      block_end_stream_ = frame.has_flag(http2::flags::kEndStream);
      block_status_ = 0;
      block_status_bad_ = block_length_seen_ = block_length_bad_ = block_name_bad_ = false;
      block_frame_bytes_ = block_list_bytes_ = 0;
      [[fallthrough]];
    case FrameType::kContinuation: {
      if (block_stream_ == 0 || id != block_stream_) {
        return ServerFault(ErrorCode::kProtocolError, "CONTINUATION without HEADERS");
      }
      // Endless CONTINUATION frames (empty ones too) or a header list that decodes to far more
      // than it took on the wire end the connection, as an oversized HTTP/1.1 head does.
      block_frame_bytes_ += http2::kFrameHeaderSize + frame.payload.size();
      if (block_frame_bytes_ > kMaxHeaderBlockBytes) {
        return ResourceExhaustedError("HTTP/2: response header block too large");
      }
      const bool final = frame.has_flag(http2::flags::kEndHeaders);
      Status s = decoder_.Decode(
          frame.payload, final, [this](std::string_view name, std::string_view value) {
            block_list_bytes_ += name.size() + value.size() + 32;
            // A block the decoder replays from the last one it kept has the fields that block
            // had, and those passed this check (a name that failed it ended the connection).
            if (!block_name_bad_ && !decoder_.replayed() && HasAsciiUppercase(name)) {
              block_name_bad_ = true;
              block_name_text_.assign(name.substr(0, 32));
            }
            if (name == "content-length") {
              uint64_t v = 0;
              if (!ParseContentLength(value, &v) || (block_length_seen_ && v != block_length_)) {
                block_length_bad_ = true;
              }
              block_length_ = v;
              block_length_seen_ = true;
              return;
            }
            if (name != ":status") return;
            const bool digits =
                value.size() == 3 && std::all_of(value.begin(), value.end(),
                                                 [](char c) { return c >= '0' && c <= '9'; });
            uint16_t v = 0;
            if (digits) std::from_chars(value.data(), value.data() + value.size(), v);
            if (!digits || v < 100 || v > 599 || block_status_ != 0 || block_status_bad_) {
              block_status_bad_ = true;
              block_status_text_.assign(value.substr(0, 16));
            }
            block_status_ = v;
          });
      if (!s.ok()) return s;
      if (block_list_bytes_ > kMaxHeaderBlockBytes) {
        return ResourceExhaustedError("HTTP/2: response header list too large");
      }
      if (!final) return OkStatus();
      block_stream_ = 0;
      // A malformed response (RFC 9113 §8.1.1) ends the connection: the server is broken, and
      // counting it as answered would hide that.
      if (block_status_bad_) {
        return ServerFault(ErrorCode::kProtocolError,
                           "invalid :status \"" + block_status_text_ + "\"");
      }
      if (block_name_bad_) {
        return ServerFault(ErrorCode::kProtocolError,
                           "uppercase in header field name \"" + block_name_text_ + "\"");
      }
      // A block in one HEADERS frame has the stream CheckStream found; one that ends in a
      // CONTINUATION finds it again (requests sent between its frames may have moved the streams).
      if (open == nullptr) open = Find(id);
      if (open == nullptr) return OkStatus();  // CheckStream let only open streams in
      if (open->status != 0) {
        // Trailers: no pseudo-fields, and they end the stream.
        if (block_status_ != 0 || !block_end_stream_) {
          return ServerFault(ErrorCode::kProtocolError,
                             "a header block after the response head that is not trailers");
        }
      } else if (block_status_ == 0) {
        return ServerFault(ErrorCode::kProtocolError, "response head without :status");
      } else if (block_status_ < 200) {
        if (block_status_ == 101) return ServerFault(ErrorCode::kProtocolError, "unexpected 101");
        if (block_end_stream_) {
          return ServerFault(ErrorCode::kProtocolError, "a 1xx head ends the stream");
        }
        if (++open->interim > kMaxInterimHeads) {
          return ServerFault(ErrorCode::kProtocolError, "too many 1xx responses");
        }
      } else {
        // The final head: how much content the DATA must add up to (RFC 9113 §8.1.1).
        if (block_length_bad_) {
          return ServerFault(ErrorCode::kProtocolError, "invalid content-length");
        }
        open->status = block_status_;
        if (head_request_ || block_status_ == 204 || block_status_ == 304) {
          open->body_known = true;  // no content, whatever content-length says
          open->body_left = 0;
        } else if (block_length_seen_) {
          open->body_known = true;
          open->body_left = block_length_;
        }
      }
      if (block_end_stream_) return EndResponse(*open, listener);
      return OkStatus();
    }
    case FrameType::kData: {
      const uint32_t length = frame.header.length;
      if (!connection_window_.OnData(length)) {
        return ServerFault(ErrorCode::kFlowControlError, "DATA beyond our connection window");
      }
      data_bytes_ += frame.payload.size();
      if (uint32_t inc = connection_window_.OnConsumed(length); inc > 0) {
        http2::AppendWindowUpdate(0, inc, out);
      }
      // DATA passes CheckStream only on an open stream of ours.
      if (Status s = CheckStream(frame.header.type, id, &open); !s.ok()) return s;
      if (open->status == 0) {
        return ServerFault(ErrorCode::kProtocolError, "DATA before the response head");
      }
      // Content (padding aside) beyond what the head declared, or any on a response that has
      // none, is malformed.
      if (open->body_known) {
        if (frame.payload.size() > open->body_left) {
          return ServerFault(ErrorCode::kProtocolError,
                             OnStream("DATA beyond the response's content-length (none for "
                                      "HEAD, 204, 304)",
                                      id));
        }
        open->body_left -= frame.payload.size();
      }
      if (frame.has_flag(http2::flags::kEndStream)) return EndResponse(*open, listener);
      open->unacked += length;
      if (open->unacked >= options_.window / 2) {
        http2::AppendWindowUpdate(id, open->unacked, out);
        open->unacked = 0;
      }
      return OkStatus();
    }
    case FrameType::kPushPromise:
      return ServerFault(ErrorCode::kProtocolError, "PUSH_PROMISE although push is disabled");
    default:
      return OkStatus();  // PRIORITY (any stream may carry one), extensions
  }
}

Status H2Session::CheckStream(uint8_t type, uint32_t id, OpenStream** open) {
  *open = nullptr;
  // Our ids are odd and handed out in order; the server may open none (push is off).
  if ((id & 1) == 0 || id >= next_stream_id_) {
    return ServerFault(ErrorCode::kProtocolError,
                       OnStream(http2::FrameTypeName(type), id) + ", which we never opened");
  }
  *open = Find(id);
  if (*open == nullptr && (type == static_cast<uint8_t>(FrameType::kHeaders) ||
                           type == static_cast<uint8_t>(FrameType::kData))) {
    // The server ended it (END_STREAM, or its RST_STREAM): we reset none of ours and go on.
    return ServerFault(ErrorCode::kStreamClosed,
                       OnStream(http2::FrameTypeName(type), id) + " after the server ended it");
  }
  return OkStatus();
}

Status H2Session::EndResponse(OpenStream& stream, Listener* listener) {
  if (stream.body_known && stream.body_left != 0) {
    return ServerFault(ErrorCode::kProtocolError,
                       OnStream("END_STREAM before the response's content-length", stream.id));
  }
  const uint32_t id = stream.id;
  const uint16_t status = stream.status;
  Remove(&stream);
  listener->OnResponse(id, status);
  return OkStatus();
}

H2Session::OpenStream* H2Session::Find(uint32_t id) {
  for (OpenStream& o : streams_) {
    if (o.id == id) return &o;
  }
  return nullptr;
}

void H2Session::Remove(OpenStream* stream) {
  *stream = streams_.back();
  streams_.pop_back();
  --open_streams_;
}

}  // namespace sluice::loadgen
