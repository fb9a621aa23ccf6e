#include "loadgen/h2_session.h"

#include <algorithm>
#include <charconv>

namespace sluice::loadgen {

using http2::DecodeResult;
using http2::ErrorCode;
using http2::Frame;
using http2::FrameType;

H2Session::H2Session(const Options& options,
                     std::vector<std::pair<std::string, std::string>> fields, std::string body)
    : options_(options),
      fields_(std::move(fields)),
      body_(std::move(body)),
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
  streams_.push_back({id, 0, 0, 0});
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
      return InvalidArgumentError("HTTP/2: frame larger than our SETTINGS_MAX_FRAME_SIZE");
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
        return InvalidArgumentError("HTTP/2: " + d.error.debug());
      }
      // A malformed frame on one stream: that stream fails, if it is one of ours still open (a
      // stream that ended, or never was, completes nothing: it was counted once, or never).
      http2::AppendRstStream(d.error.stream_id(), d.error.code(), out);
      uint16_t status = 0;
      if (Close(d.error.stream_id(), &status)) {
        listener->OnStreamReset(d.error.stream_id(), d.error.code());
      }
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
    return InvalidArgumentError("HTTP/2: CONTINUATION expected");
  }
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
      uint16_t status;
      if (Close(id, &status)) listener->OnStreamReset(id, frame.error_code);
      return OkStatus();
    }
    case FrameType::kHeaders:
      block_stream_ = id;
      block_end_stream_ = frame.has_flag(http2::flags::kEndStream);
      block_status_ = 0;
      block_status_bad_ = false;
      block_frame_bytes_ = block_list_bytes_ = 0;
      [[fallthrough]];
    case FrameType::kContinuation: {
      if (block_stream_ == 0 || id != block_stream_) {
        return InvalidArgumentError("HTTP/2: CONTINUATION without HEADERS");
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
      auto it = std::find_if(streams_.begin(), streams_.end(),
                             [id](const OpenStream& o) { return o.id == id; });
      if (it == streams_.end()) return OkStatus();
      // A malformed response (RFC 9113 §8.1.1) ends the connection: the server is broken, and
      // counting it as answered would hide that.
      if (block_status_bad_) {
        return InvalidArgumentError("HTTP/2: invalid :status \"" + block_status_text_ + "\"");
      }
      if (it->status != 0) {
        // Trailers: no pseudo-fields, and they end the stream.
        if (block_status_ != 0 || !block_end_stream_) {
          return InvalidArgumentError(
              "HTTP/2: a header block after the response head that is not "
              "trailers");
        }
      } else if (block_status_ == 0) {
        return InvalidArgumentError("HTTP/2: response head without :status");
      } else if (block_status_ < 200) {
        if (block_status_ == 101) return InvalidArgumentError("HTTP/2: unexpected 101");
        if (block_end_stream_) return InvalidArgumentError("HTTP/2: a 1xx head ends the stream");
        if (++it->interim > kMaxInterimHeads) {
          return InvalidArgumentError("HTTP/2: too many 1xx responses");
        }
      } else {
        it->status = block_status_;
      }
      if (block_end_stream_) EndStream(id, listener);
      return OkStatus();
    }
    case FrameType::kData: {
      const uint32_t length = frame.header.length;
      if (!connection_window_.OnData(length)) {
        return InvalidArgumentError("HTTP/2: DATA beyond our connection window");
      }
      data_bytes_ += frame.payload.size();
      if (uint32_t inc = connection_window_.OnConsumed(length); inc > 0) {
        http2::AppendWindowUpdate(0, inc, out);
      }
      auto u = std::find_if(streams_.begin(), streams_.end(),
                            [id](const OpenStream& o) { return o.id == id; });
      if (u != streams_.end() && u->status == 0) {
        return InvalidArgumentError("HTTP/2: DATA before the response head");
      }
      if (u != streams_.end()) {
        u->unacked += length;
        if (u->unacked >= options_.window / 2 && !frame.has_flag(http2::flags::kEndStream)) {
          http2::AppendWindowUpdate(id, u->unacked, out);
          u->unacked = 0;
        }
      }
      if (frame.has_flag(http2::flags::kEndStream)) EndStream(id, listener);
      return OkStatus();
    }
    case FrameType::kPushPromise:
      return InvalidArgumentError("HTTP/2: PUSH_PROMISE although push is disabled");
    default:
      return OkStatus();  // PRIORITY, WINDOW_UPDATE (our bodies are small), extensions
  }
}

void H2Session::EndStream(uint32_t id, Listener* listener) {
  uint16_t status;
  if (Close(id, &status)) listener->OnResponse(id, status);
}

bool H2Session::Close(uint32_t id, uint16_t* status) {
  auto it = std::find_if(streams_.begin(), streams_.end(),
                         [id](const OpenStream& o) { return o.id == id; });
  if (it == streams_.end()) return false;
  *status = it->status;
  *it = streams_.back();
  streams_.pop_back();
  --open_streams_;
  return true;
}

}  // namespace sluice::loadgen
