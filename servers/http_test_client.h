// A raw-socket HTTP/1.1 client for end-to-end server tests: it sends exactly
// the bytes a test gives it (malformed, pipelined, one byte at a time) and
// parses what comes back strictly enough to assert on exact bytes.
//
// Every blocking call is bounded: the socket has SO_RCVTIMEO/SO_SNDTIMEO
// (Options::timeout) and waits use poll with a deadline, so a server bug
// fails a test instead of hanging it.
//
//   auto client = sluice::testing::HttpTestClient::Connect(server.port());
//   ASSERT_TRUE(client.ok()) << client.status().ToString();
//   ASSERT_TRUE((*client)->Send("GET /plaintext HTTP/1.1\r\nHost: x\r\n\r\n"));
//   auto response = (*client)->ReadResponse();
//   ASSERT_TRUE(response.ok());
//   EXPECT_EQ(response->status, 200);
//   EXPECT_EQ(response->body, "Hello, World!");
//
// Thread-safety: thread-compatible; Send and the reads may run on two
// different threads at once (one writer, one reader), as on any socket.
#ifndef SLUICE_SERVERS_HTTP_TEST_CLIENT_H_
#define SLUICE_SERVERS_HTTP_TEST_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace sluice::testing {

struct HttpTestResponse {
  int status = 0;
  std::string reason;
  // Names as sent; values without surrounding whitespace.
  std::vector<std::pair<std::string, std::string>> headers;
  // The body after de-chunking.
  std::string body;
  // Everything received for this response, exactly.
  std::string raw;
  bool chunked = false;
  // The body was delimited by the connection's close (no framing field).
  bool close_delimited = false;

  // The first header named `name` (ASCII case-insensitive), or "" if none.
  std::string Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
};

// How a wait for the server's close ended.
enum class CloseOutcome { kEof, kReset, kTimeout, kUnexpectedData };
const char* CloseOutcomeName(CloseOutcome outcome);

class HttpTestClient {
 public:
  struct Options {
    // Bound on every blocking send and receive.
    std::chrono::milliseconds timeout{10'000};
    // SO_RCVBUF / SO_SNDBUF; 0 keeps the kernel's default.
    int receive_buffer = 0;
    int send_buffer = 0;
  };

  // Connects to 127.0.0.1:`port`. UNAVAILABLE with the errno text on failure
  // (for example ECONNREFUSED once a server stopped listening).
  [[nodiscard]] static StatusOr<std::unique_ptr<HttpTestClient>> Connect(uint16_t port,
                                                                         Options options);
  [[nodiscard]] static StatusOr<std::unique_ptr<HttpTestClient>> Connect(uint16_t port) {
    return Connect(port, Options());
  }
  ~HttpTestClient();
  HttpTestClient(const HttpTestClient&) = delete;
  HttpTestClient& operator=(const HttpTestClient&) = delete;

  int fd() const { return fd_; }

  // Sends all of `data`; false on error or timeout.
  [[nodiscard]] bool Send(std::string_view data);

  // Reads one response (a 1xx interim response counts as one). `head_request`:
  // the response to a HEAD, which has no body whatever its framing says.
  // UNAVAILABLE if the connection ended or timed out first, DATA_LOSS-like
  // INTERNAL for a response that does not parse.
  [[nodiscard]] StatusOr<HttpTestResponse> ReadResponse(bool head_request = false);

  // Reads exactly `size` bytes (e.g. a raw stretch of a stream).
  [[nodiscard]] StatusOr<std::string> ReadExactly(size_t size);
  // Reads up to and including the next CRLF.
  [[nodiscard]] StatusOr<std::string> ReadLine();

  // Waits up to `timeout` for the server to close. Bytes that arrive first
  // are appended to *extra (if given) and make the outcome kUnexpectedData
  // unless `allow_data`.
  CloseOutcome WaitForClose(std::chrono::milliseconds timeout, std::string* extra = nullptr,
                            bool allow_data = false);

  // Bytes received but not yet returned by a read.
  const std::string& pending() const { return buffer_; }

  // Half-closes (FIN): the server sees EOF.
  void ShutdownWrite();
  // Aborts with a reset (SO_LINGER 0) and forgets the socket.
  void CloseWithReset();
  // Closes normally and forgets the socket.
  void Close();

 private:
  HttpTestClient(int fd, Options options) : fd_(fd), options_(options) {}
  // Appends at least one byte to buffer_; false at EOF, error or timeout.
  bool Fill();
  // Ensures buffer_ has `size` bytes.
  bool FillTo(size_t size);
  // Returns the offset just past the next CRLF at or after `from`, filling
  // as needed; npos if the connection ended first.
  size_t FindLineEnd(size_t from);

  int fd_;
  const Options options_;
  std::string buffer_;
  bool eof_ = false;
};

// A deterministic byte pattern of `size` bytes (different per `seed`).
std::string TestPattern(size_t size, uint32_t seed);

// Index of the first byte where `a` and `b` differ, or -1 if equal.
long FirstMismatch(std::string_view a, std::string_view b);

}  // namespace sluice::testing

#endif  // SLUICE_SERVERS_HTTP_TEST_CLIENT_H_
