// Fuzzes a whole HTTP/1.1 server connection in process (over core/memory_transport.h): the input
// is a program for a client that pipelines valid requests (GET, HEAD, POST with a Content-Length
// or a chunked body, Expect: 100-continue, HTTP/1.0, Connection: close), raw bytes and broken
// chunks, delivered in pieces split where the program says. The server routes to handlers that
// answer inline, read and echo the body, stream a large answer, or throw.
//
// Byte 0, bit 0: whether the client reads what the server sends (a client that never reads makes
// the server's output back up). Then each op is one byte, its low nibble the kind and its high
// nibble a parameter, plus the bytes it takes.
//
// Checked, besides "no crash, no sanitizer report, no leak": what the server writes starts as an
// HTTP/1.1 status line, and once the client is done the connection closes and every pool block
// comes back.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "core/memory_transport.h"
#include "http/fuzz_connection.h"
#include "http/fuzz_dispatcher.h"
#include "http1/connection.h"

namespace sluice::http1 {
namespace {

using http::FuzzCheck;

size_t ThrowBodySize(const http::Request& req) { return req.query() == "late" ? 20000 : 10; }

class Client final : public http::FuzzConnectionHarness<Connection, ConnectionCounters> {
 public:
  explicit Client(bool reads) : FuzzConnectionHarness(reads, &ThrowBodySize) {
    conn_ = std::make_shared<Connection>(TakeTransport(), ConnectionOptions{}, &dispatcher_,
                                         &counters_);
  }

 private:
  void Execute(http::FuzzProgram& p) override {
    while (!p.done()) {
      const uint8_t op = p.Byte();
      const uint8_t arg = op >> 4;
      switch (op & 0x0f) {
        case 0: {  // a request without a body
          static constexpr std::array<std::string_view, 6> kTargets = {
              "GET /plaintext", "HEAD /plaintext", "GET /big",
              "GET /throw",     "GET /throw?late", "GET /nowhere"};
          pending_ += kTargets[arg % kTargets.size()];
          pending_ += (arg & 8) != 0 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\nHost: fuzz\r\n";
          if ((arg & 4) != 0) pending_ += "Connection: close\r\n";
          pending_ += "\r\n";
          break;
        }
        case 1: {  // POST /echo with a Content-Length body (maybe an Expect: 100-continue)
          const std::string_view body = p.Bytes(p.Byte() % 64);
          pending_ += "POST /echo HTTP/1.1\r\nHost: fuzz\r\nContent-Length: ";
          pending_ += std::to_string(body.size() + (arg & 3));  // sometimes more than sent
          pending_ += (arg & 4) != 0 ? "\r\nExpect: 100-continue\r\n\r\n" : "\r\n\r\n";
          pending_ += body;
          break;
        }
        case 2:  // POST /echo, chunked: the head; chunks follow as ops
          pending_ += "POST /echo HTTP/1.1\r\nHost: fuzz\r\nTransfer-Encoding: chunked\r\n\r\n";
          break;
        case 3: {  // a chunk (arg 0: the last one; arg 15: a broken size line)
          if (arg == 0) {
            pending_ += "0\r\n\r\n";
          } else if (arg == 15) {
            pending_ += p.Bytes(p.Byte() % 16);
            pending_ += "\r\n";
          } else {
            const std::string_view data = p.Bytes(arg * 4);
            char size[16];
            std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
            pending_ += size;
            pending_ += data;
            pending_ += "\r\n";
          }
          break;
        }
        case 4:  // raw bytes: a mutated request, junk, a header line
          pending_ += p.Bytes(p.Byte());
          break;
        case 5:  // deliver what is buffered: the connection gets its input in pieces
          Deliver();
          break;
        case 6:  // let the server write
          Drain();
          break;
        default:
          break;
      }
      if (pending_.size() > (64u << 10)) Deliver();
    }
  }

  void Drain() override {
    PipeReader& in = transport_->client_in();
    ReadResult read;
    if (!in.Read(&read, nullptr)) return;
    if (!started_ && read.buffer.size() >= 9) {
      std::string head = read.buffer.ToString().substr(0, 9);
      FuzzCheck(head == "HTTP/1.1 " || head == "HTTP/1.0 ", "the output is not an HTTP response");
      started_ = true;
    }
    (void)in.AdvanceTo(read.buffer.size());
  }

  bool started_ = false;
};

}  // namespace
}  // namespace sluice::http1

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  sluice::http::FuzzProgram program(data + 1, size - 1);
  sluice::http1::Client client((data[0] & 1) == 0);
  client.Run(program);
  return 0;
}
