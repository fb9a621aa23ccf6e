#include "servers/http_test_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "core/ascii.h"

namespace sluice::testing {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Status Malformed(std::string_view what, std::string_view bytes) {
  return InternalError("malformed response (" + std::string(what) + "): \"" +
                       std::string(bytes.substr(0, 200)) + "\"");
}

}  // namespace

std::string HttpTestResponse::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (EqualsIgnoreCase(n, name)) return v;
  }
  return "";
}

bool HttpTestResponse::HasHeader(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (EqualsIgnoreCase(n, name)) return true;
  }
  return false;
}

const char* CloseOutcomeName(CloseOutcome outcome) {
  switch (outcome) {
    case CloseOutcome::kEof:
      return "EOF";
    case CloseOutcome::kReset:
      return "reset";
    case CloseOutcome::kTimeout:
      return "timeout";
    case CloseOutcome::kUnexpectedData:
      return "unexpected data";
  }
  return "?";
}

StatusOr<std::unique_ptr<HttpTestClient>> HttpTestClient::Connect(uint16_t port, Options options) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
  timeval tv = {};
  tv.tv_sec = options.timeout.count() / 1000;
  tv.tv_usec = (options.timeout.count() % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (options.receive_buffer > 0) {
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &options.receive_buffer, sizeof(options.receive_buffer));
  }
  if (options.send_buffer > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &options.send_buffer, sizeof(options.send_buffer));
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    close(fd);
    return UnavailableError(std::string("connect: ") + std::strerror(err));
  }
  return std::unique_ptr<HttpTestClient>(new HttpTestClient(fd, options));
}

HttpTestClient::~HttpTestClient() {
  if (fd_ >= 0) close(fd_);
}

bool HttpTestClient::Send(std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool HttpTestClient::Fill() {
  if (eof_ || fd_ < 0) return false;
  char buf[65536];
  while (true) {
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) eof_ = true;
      return false;
    }
    buffer_.append(buf, static_cast<size_t>(n));
    return true;
  }
}

bool HttpTestClient::FillTo(size_t size) {
  while (buffer_.size() < size) {
    if (!Fill()) return false;
  }
  return true;
}

size_t HttpTestClient::FindLineEnd(size_t from) {
  while (true) {
    size_t crlf = buffer_.find("\r\n", from);
    if (crlf != std::string::npos) return crlf + 2;
    from = buffer_.empty() ? 0 : buffer_.size() - 1;
    if (!Fill()) return std::string::npos;
  }
}

StatusOr<HttpTestResponse> HttpTestClient::ReadResponse(bool head_request) {
  // The head.
  size_t head_end;
  size_t from = 0;
  while ((head_end = buffer_.find("\r\n\r\n", from)) == std::string::npos) {
    from = buffer_.size() < 3 ? 0 : buffer_.size() - 3;
    if (!Fill()) {
      return UnavailableError(std::string(eof_ ? "EOF" : "error or timeout") +
                              " before a response head; received \"" + buffer_ + "\"");
    }
  }
  head_end += 4;
  HttpTestResponse response;
  std::string_view head(buffer_.data(), head_end);
  size_t line_end = head.find("\r\n");
  std::string_view status_line = head.substr(0, line_end);
  if (status_line.size() < 12 || status_line.substr(0, 9) != "HTTP/1.1 " ||
      (status_line.size() > 12 && status_line[12] != ' ')) {
    return Malformed("status line", head);
  }
  int status = 0;
  auto [end, ec] = std::from_chars(status_line.data() + 9, status_line.data() + 12, status);
  if (ec != std::errc() || end != status_line.data() + 12) return Malformed("status code", head);
  response.status = status;
  if (status_line.size() > 13) response.reason = std::string(status_line.substr(13));
  size_t pos = line_end + 2;
  while (pos < head_end - 2) {
    size_t eol = head.find("\r\n", pos);
    std::string_view line = head.substr(pos, eol - pos);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return Malformed("field line", head);
    response.headers.emplace_back(std::string(line.substr(0, colon)),
                                  std::string(Trim(line.substr(colon + 1))));
    pos = eol + 2;
  }
  size_t consumed = head_end;

  // The body.
  const bool no_body = head_request || status < 200 || status == 204 || status == 304;
  const std::string te = response.Header("transfer-encoding");
  const std::string cl = response.Header("content-length");
  if (no_body) {
    // Nothing.
  } else if (!te.empty()) {
    if (te != "chunked") return Malformed("transfer-encoding", head);
    response.chunked = true;
    while (true) {
      size_t size_end = FindLineEnd(consumed);
      if (size_end == std::string::npos) return UnavailableError("connection ended in a chunk");
      std::string_view size_line(buffer_.data() + consumed, size_end - 2 - consumed);
      uint64_t size = 0;
      auto [e, err] =
          std::from_chars(size_line.data(), size_line.data() + size_line.size(), size, 16);
      if (err != std::errc() || size_line.empty()) return Malformed("chunk size", size_line);
      consumed = size_end;
      if (size == 0) {
        // Trailers up to the empty line.
        while (true) {
          size_t trailer_end = FindLineEnd(consumed);
          if (trailer_end == std::string::npos) {
            return UnavailableError("connection ended in the trailers");
          }
          bool empty = trailer_end == consumed + 2;
          consumed = trailer_end;
          if (empty) break;
        }
        break;
      }
      if (!FillTo(consumed + size + 2)) return UnavailableError("connection ended in a chunk");
      if (buffer_.compare(consumed + size, 2, "\r\n") != 0) {
        return Malformed("chunk end", buffer_.substr(consumed + size, 10));
      }
      response.body.append(buffer_, consumed, size);
      consumed += size + 2;
    }
  } else if (!cl.empty()) {
    uint64_t length = 0;
    auto [e, err] = std::from_chars(cl.data(), cl.data() + cl.size(), length);
    if (err != std::errc() || e != cl.data() + cl.size()) return Malformed("content-length", cl);
    if (!FillTo(consumed + length)) {
      return UnavailableError("connection ended in the body: got " +
                              std::to_string(buffer_.size() - consumed) + " of " + cl);
    }
    response.body = buffer_.substr(consumed, length);
    consumed += length;
  } else {
    response.close_delimited = true;
    while (Fill()) {
    }
    if (!eof_) return UnavailableError("error or timeout in a close-delimited body");
    response.body = buffer_.substr(consumed);
    consumed = buffer_.size();
  }
  response.raw = buffer_.substr(0, consumed);
  buffer_.erase(0, consumed);
  return response;
}

StatusOr<std::string> HttpTestClient::ReadExactly(size_t size) {
  if (!FillTo(size)) {
    return UnavailableError("got " + std::to_string(buffer_.size()) + " of " +
                            std::to_string(size) + " bytes");
  }
  std::string out = buffer_.substr(0, size);
  buffer_.erase(0, size);
  return out;
}

StatusOr<std::string> HttpTestClient::ReadLine() {
  size_t end = FindLineEnd(0);
  if (end == std::string::npos) return UnavailableError("connection ended before a CRLF");
  std::string out = buffer_.substr(0, end);
  buffer_.erase(0, end);
  return out;
}

CloseOutcome HttpTestClient::WaitForClose(std::chrono::milliseconds timeout, std::string* extra,
                                          bool allow_data) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool got_data = !buffer_.empty();
  if (extra != nullptr) extra->append(buffer_);
  buffer_.clear();
  if (eof_) return got_data && !allow_data ? CloseOutcome::kUnexpectedData : CloseOutcome::kEof;
  char buf[65536];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return CloseOutcome::kTimeout;
    pollfd p = {.fd = fd_, .events = POLLIN, .revents = 0};
    int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return CloseOutcome::kTimeout;
    ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) {
      if (errno == ECONNRESET) {
        return got_data && !allow_data ? CloseOutcome::kUnexpectedData : CloseOutcome::kReset;
      }
      return CloseOutcome::kTimeout;
    }
    if (n == 0) {
      eof_ = true;
      return got_data && !allow_data ? CloseOutcome::kUnexpectedData : CloseOutcome::kEof;
    }
    got_data = true;
    if (extra != nullptr) extra->append(buf, static_cast<size_t>(n));
  }
}

void HttpTestClient::ShutdownWrite() {
  if (fd_ >= 0) shutdown(fd_, SHUT_WR);
}

void HttpTestClient::CloseWithReset() {
  if (fd_ < 0) return;
  linger abort_on_close = {.l_onoff = 1, .l_linger = 0};
  setsockopt(fd_, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof(abort_on_close));
  close(fd_);
  fd_ = -1;
}

void HttpTestClient::Close() {
  if (fd_ < 0) return;
  close(fd_);
  fd_ = -1;
}

std::string TestPattern(size_t size, uint32_t seed) {
  std::string out(size, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (char& c : out) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  return out;
}

long FirstMismatch(std::string_view a, std::string_view b) {
  auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  if (ia == a.end() && ib == b.end()) return -1;
  return static_cast<long>(ia - a.begin());
}

}  // namespace sluice::testing
