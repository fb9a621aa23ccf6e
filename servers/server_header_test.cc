// servers/server.h is what an embedder includes: it shows the API (options, limits, counters,
// routes, middleware) and not the internals of the protocol connections, the TLS adapter or the
// transports, which would otherwise be compiled into every embedder's build and installed as
// public headers. This test includes only the two public server headers and checks which
// project headers came with them.
#include <gtest/gtest.h>

#include "servers/server.h"
#include "servers/server_main.h"

namespace sluice {
namespace {

TEST(ServerHeader, DoesNotBringInTheProtocolConnections) {
#if defined(SLUICE_HTTP1_CONNECTION_H_)
  ADD_FAILURE() << "servers/server.h includes http1/connection.h";
#endif
#if defined(SLUICE_HTTP2_CONNECTION_H_)
  ADD_FAILURE() << "servers/server.h includes http2/connection.h";
#endif
#if defined(SLUICE_HTTP2_FRAME_WRITER_H_)
  ADD_FAILURE() << "servers/server.h includes http2/frame_writer.h";
#endif
#if defined(SLUICE_HTTP2_ABUSE_GUARD_H_)
  ADD_FAILURE() << "servers/server.h includes http2/abuse_guard.h";
#endif
}

TEST(ServerHeader, DoesNotBringInTheTransportsOrTls) {
#if defined(SLUICE_CORE_TLS_H_)
  ADD_FAILURE() << "servers/server.h includes core/tls.h";
#endif
#if defined(SLUICE_CORE_TRANSPORT_H_)
  ADD_FAILURE() << "servers/server.h includes core/transport.h";
#endif
#if defined(SLUICE_CORE_EVENT_LOOP_H_)
  ADD_FAILURE() << "servers/server.h includes core/event_loop.h";
#endif
}

TEST(ServerHeader, StillShowsWhatAnEmbedderConfigures) {
  // The settings of both protocols remain reachable through ServerOptions.
  ServerOptions options;
  options.http1.keep_alive_timeout = std::chrono::seconds(5);
  options.http2.output.strategy = http2::OutputStrategy::kQueue;
  options.http2.limits.rapid_reset_per_second = 50;
  EXPECT_EQ(options.http2.output.strategy, http2::OutputStrategy::kQueue);
  EXPECT_EQ(http2::OutputStrategyName(options.http2.output.strategy), "queue");
}

}  // namespace
}  // namespace sluice
