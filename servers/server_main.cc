#include "servers/server_main.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/version.h"

namespace sluice {
namespace {

template <typename T>
bool ParseNumber(std::string_view text, T* out, T min, T max) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    return false;
  }
  *out = value;
  return true;
}

// An IPv4 or IPv6 literal ("[::1]" taken as "::1"), or "localhost" (taken as 127.0.0.1): the
// address to bind, or false. Host names are not resolved.
bool ParseBindAddress(std::string_view text, std::string* out) {
  if (text == "localhost") {
    *out = "127.0.0.1";
    return true;
  }
  if (text.size() > 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  const std::string host(text);
  in6_addr storage;
  const int family = host.find(':') == std::string::npos ? AF_INET : AF_INET6;
  if (inet_pton(family, host.c_str(), &storage) != 1) return false;
  *out = host;
  return true;
}

}  // namespace

std::string ServerUsage(std::string_view program, std::string_view description) {
  std::string u =
      "usage: " + std::string(program) + " [flags]\n\n" + std::string(description) + "\n\n";
  u += R"(flags:
  --address=ADDR            IP address to bind (default 127.0.0.1; 0.0.0.0 or :: for all;
                            localhost is 127.0.0.1; host names are not resolved)
  --port=N                  port (default 8080; 0 picks a free one, shown in the ready line)
  --threads=N               event loops, one thread each (default 1)
  --handler-threads=N       run handlers on N worker threads (default 0: on the loop thread)
  --tls                     serve HTTPS (needs --tls-cert/--tls-key or --tls-self-signed)
  --tls-cert=FILE           certificate chain (PEM)
  --tls-key=FILE            private key (PEM)
  --tls-self-signed         generate a self-signed certificate for localhost at start
  --tls-cert-out=FILE       with --tls-self-signed: write the generated certificate there (for
                            curl --cacert)
  --header-timeout-ms=N     a request head must arrive within N ms of its first byte (10000)
  --keep-alive-timeout-ms=N close idle connections after N ms (60000)
  --max-body-bytes=N        largest request body accepted (30000000; more gets 413)
  --send-timeout-ms=N       abort a closing or idle connection whose unsent output (a slow reader's
                            response) has not moved for N ms (60000)
  --max-connections=N       open connections at most; more are closed on arrival (0: no limit)
  --pool-trim-interval-ms=N give the memory of buffers idle this long back to the system (1000;
                            0: never)
  --deferred-response-timeout-ms=N
                            give up a deferred response that made no progress this long: 504 or
                            cut short (HTTP/1.1), RST_STREAM CANCEL (HTTP/2) (60000; 0: never)
  --no-h2                   serve HTTP/1.1 only (no ALPN h2, no h2c prior knowledge)
  --protocols=LIST          http/1.1,h2 (default), http/1.1 (= --no-h2) or h2: HTTP/2 only, h2c
                            from the first byte (no sniffing) or ALPN h2 only over TLS
  --transport=T             epoll (default) or io_uring: one ring per event loop, receives, sends
                            and accepts batched into one io_uring_enter per loop pass (epoll when
                            the kernel refuses io_uring: the ready line and stderr say so)
  --h2-output=STRATEGY      HTTP/2 output strategy: two_locks, single_lock (default) or queue
  --h2-max-streams=N        HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS (100)
  --h2-stall-timeout-ms=N   HTTP/2: GOAWAY a peer that keeps output blocked on a closed window this
                            long (30000)
  --unfinished-request-timeout-ms=N
                            a request answered before its body ended must end this long after the
                            answer (10000): else HTTP/1.1 closes the connection after the
                            response, HTTP/2 resets the stream with RST_STREAM(NO_ERROR)
                            (--h2-unfinished-request-timeout-ms is the same flag)
  --telemetry=STYLE         off (default), listener or middleware: how metrics and traces are fed
  --metrics                 OpenTelemetry HTTP server metrics, served at GET /metrics (Prometheus
                            text); needs --telemetry=listener or middleware
  --tracing-ratio=R         server spans for this share (0..1) of new traces; W3C traceparent
                            followed (needs a --telemetry style)
  --otlp-endpoint=URL       export spans and metrics over OTLP/HTTP to URL (http://127.0.0.1:4318)
  --otlp-protocol=P         spans in http/protobuf (default) or http/json; metrics in JSON
  --span-queue=N            room for N spans waiting for the exporter (8192), 256 bytes
                            each; past it they are dropped and counted
  --access-log=FILE         one line per request to FILE (written off the loop threads)
  --access-log-format=F     combined (default), common or json
  --help                    this text
  --version                 sluice's version and the pinned library versions

Once listening, prints one line on stdout:
  ready address=HOST:PORT scheme=http|https protocols=... transport=epoll|io_uring pid=PID
SIGINT/SIGTERM: stop accepting, finish in-flight requests, exit 0.
Exit status 2, before listening: a bad flag, or a bad input file (--tls-cert/--tls-key missing,
unreadable, not PEM or not matching; --tls-cert-out or --access-log not writable); 1: cannot
start for another reason (the port in use, no permission to bind).
)";
  return u;
}

Status ParseServerFlags(int argc, char** argv, ServerOptions* options, bool* help, bool* version) {
  *help = false;
  if (version != nullptr) *version = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view name = arg;
    std::string_view value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto need_value = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 < argc) {
        value = argv[++i];
        return true;
      }
      return false;
    };
    auto bad = [&](std::string_view why) {
      return InvalidArgumentError(std::string(name) + ": " + std::string(why));
    };
    const bool is_switch = name == "--help" || name == "-h" || name == "--tls" ||
                           name == "--tls-self-signed" || name == "--no-h2" ||
                           name == "--metrics" || name == "--version";
    if (is_switch && has_value) return bad("takes no value");
    if (name == "--help" || name == "-h") {
      *help = true;
      return OkStatus();
    } else if (name == "--version") {
      if (version != nullptr) *version = true;
      return OkStatus();
    } else if (name == "--telemetry") {
      if (!need_value() || !telemetry::ParseHookStyle(value, &options->telemetry.style)) {
        return bad("needs off, listener or middleware");
      }
    } else if (name == "--metrics") {
      options->telemetry.metrics = true;
    } else if (name == "--tracing-ratio") {
      double ratio = -1;
      if (need_value()) {
        const std::string text(value);
        char* end = nullptr;
        ratio = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) ratio = -1;
      }
      if (!(ratio >= 0 && ratio <= 1)) return bad("needs a ratio from 0 to 1");
      options->telemetry.tracing_ratio = ratio;
    } else if (name == "--otlp-endpoint") {
      if (!need_value() || value.empty()) return bad("needs a URL (http://HOST:PORT)");
      options->telemetry.otlp_endpoint = std::string(value);
    } else if (name == "--otlp-protocol") {
      if (!need_value()) return bad("needs http/protobuf or http/json");
      if (value == "http/protobuf") {
        options->telemetry.otlp_protocol = telemetry::OtlpProtocol::kProtobuf;
      } else if (value == "http/json") {
        options->telemetry.otlp_protocol = telemetry::OtlpProtocol::kJson;
      } else {
        return bad("needs http/protobuf or http/json");
      }
    } else if (name == "--span-queue") {
      if (!need_value() ||
          !ParseNumber<size_t>(value, &options->telemetry.span_queue, 2, 1'000'000)) {
        return bad("needs a number 2-1000000");
      }
    } else if (name == "--access-log") {
      if (!need_value() || value.empty()) return bad("needs a file");
      options->telemetry.access_log = std::string(value);
    } else if (name == "--access-log-format") {
      if (!need_value() ||
          !telemetry::ParseAccessLogFormat(value, &options->telemetry.access_log_format)) {
        return bad("needs common, combined or json");
      }
    } else if (name == "--tls") {
      options->tls.enabled = true;
    } else if (name == "--no-h2") {
      options->enable_http2 = false;
    } else if (name == "--protocols") {
      if (!need_value()) return bad("needs http/1.1, h2 or http/1.1,h2");
      bool h1 = false, h2 = false;
      for (size_t at = 0; at <= value.size();) {
        size_t comma = value.find(',', at);
        if (comma == std::string_view::npos) comma = value.size();
        const std::string_view p = value.substr(at, comma - at);
        if (p == "http/1.1" || p == "h1") {
          h1 = true;
        } else if (p == "h2" || p == "h2c") {
          h2 = true;
        } else {
          return bad("needs http/1.1, h2 or http/1.1,h2 (not \"" + std::string(p) + "\")");
        }
        at = comma + 1;
      }
      options->enable_http1 = h1;
      options->enable_http2 = h2;
    } else if (name == "--deferred-response-timeout-ms") {
      int64_t ms = 0;
      if (!need_value() || !ParseNumber<int64_t>(value, &ms, 0, 86'400'000)) {
        return bad("needs milliseconds 0-86400000 (0: never)");
      }
      options->limits.deferred_response_timeout = std::chrono::milliseconds(ms);
    } else if (name == "--send-timeout-ms") {
      int64_t ms = 0;
      if (!need_value() || !ParseNumber<int64_t>(value, &ms, 1, 86'400'000)) {
        return bad("needs milliseconds 1-86400000");
      }
      options->limits.send_timeout = std::chrono::milliseconds(ms);
    } else if (name == "--pool-trim-interval-ms") {
      int64_t ms = 0;
      if (!need_value() || !ParseNumber<int64_t>(value, &ms, 0, 86'400'000)) {
        return bad("needs milliseconds 0-86400000 (0: never)");
      }
      options->pool_trim_interval = std::chrono::milliseconds(ms);
    } else if (name == "--max-connections") {
      int64_t n = 0;
      if (!need_value() || !ParseNumber<int64_t>(value, &n, 0, 100'000'000)) {
        return bad("needs a count 0-100000000 (0: no limit)");
      }
      options->max_connections = n;
    } else if (name == "--transport") {
      if (!need_value()) return bad("needs epoll or io_uring");
      StatusOr<IoBackend> backend = ParseIoBackend(value);
      if (!backend.ok()) return bad("needs epoll or io_uring");
      options->transport = *backend;
    } else if (name == "--h2-output") {
      if (!need_value() || !http2::ParseOutputStrategy(value, &options->http2.output.strategy)) {
        return bad("needs two_locks, single_lock or queue");
      }
    } else if (name == "--unfinished-request-timeout-ms" ||
               name == "--h2-unfinished-request-timeout-ms") {
      int64_t ms = 0;
      if (!need_value() || !ParseNumber<int64_t>(value, &ms, 1, 86'400'000)) {
        return bad("needs milliseconds 1-86400000");
      }
      options->limits.unfinished_request_timeout = std::chrono::milliseconds(ms);
    } else if (name == "--h2-stall-timeout-ms") {
      int64_t ms = 0;
      if (!need_value() || !ParseNumber<int64_t>(value, &ms, 1, 86'400'000)) {
        return bad("needs milliseconds 1-86400000");
      }
      options->http2.limits.window_stall_timeout = std::chrono::milliseconds(ms);
    } else if (name == "--h2-max-streams") {
      if (!need_value() ||
          !ParseNumber<uint32_t>(value, &options->http2.max_concurrent_streams, 1, 1'000'000)) {
        return bad("needs a number 1-1000000");
      }
    } else if (name == "--tls-self-signed") {
      options->tls.enabled = true;
      options->tls.self_signed = true;
    } else if (name == "--address") {
      if (!need_value() || !ParseBindAddress(value, &options->address)) {
        return bad("needs an IPv4 or IPv6 address (127.0.0.1, 0.0.0.0, ::1, ::) or localhost");
      }
    } else if (name == "--port") {
      if (!need_value() || !ParseNumber<uint16_t>(value, &options->port, 0, 65535)) {
        return bad("needs a port number 0-65535");
      }
    } else if (name == "--threads") {
      if (!need_value() || !ParseNumber<int>(value, &options->threads, 1, 256)) {
        return bad("needs a number 1-256");
      }
    } else if (name == "--handler-threads") {
      if (!need_value() || !ParseNumber<int>(value, &options->handler_threads, 0, 1024)) {
        return bad("needs a number 0-1024");
      }
    } else if (name == "--tls-cert") {
      if (!need_value() || value.empty()) return bad("needs a file");
      options->tls.enabled = true;
      options->tls.cert_file = std::string(value);
    } else if (name == "--tls-key") {
      if (!need_value() || value.empty()) return bad("needs a file");
      options->tls.enabled = true;
      options->tls.key_file = std::string(value);
    } else if (name == "--tls-cert-out") {
      if (!need_value() || value.empty()) return bad("needs a file");
      options->tls.self_signed_cert_out = std::string(value);
    } else if (name == "--header-timeout-ms" || name == "--keep-alive-timeout-ms") {
      int64_t ms = 0;
      if (!need_value() || !ParseNumber<int64_t>(value, &ms, 1, 86'400'000)) {
        return bad("needs milliseconds 1-86400000");
      }
      (name == "--header-timeout-ms" ? options->limits.header_timeout
                                     : options->limits.idle_timeout) =
          std::chrono::milliseconds(ms);
    } else if (name == "--max-body-bytes") {
      uint64_t n = 0;
      if (!need_value() || !ParseNumber<uint64_t>(value, &n, 0, UINT64_MAX)) {
        return bad("needs a byte count");
      }
      options->limits.max_body_bytes = n;
    } else {
      return InvalidArgumentError("unknown flag " + std::string(arg));
    }
  }
  if (options->tls.self_signed &&
      (!options->tls.cert_file.empty() || !options->tls.key_file.empty())) {
    return InvalidArgumentError(
        "--tls-self-signed excludes --tls-cert and --tls-key: give one or the other");
  }
  if (!options->tls.self_signed_cert_out.empty() && !options->tls.self_signed) {
    return InvalidArgumentError(
        "--tls-cert-out needs --tls-self-signed (it writes the generated certificate)");
  }
  if (options->tls.enabled && !options->tls.self_signed &&
      (options->tls.cert_file.empty() || options->tls.key_file.empty())) {
    return InvalidArgumentError("--tls needs --tls-cert and --tls-key, or --tls-self-signed");
  }
  const telemetry::TelemetryOptions& t = options->telemetry;
  if (t.style == telemetry::HookStyle::kOff && (t.metrics || t.tracing_ratio > 0)) {
    return InvalidArgumentError(
        "--metrics and --tracing-ratio need --telemetry=listener or --telemetry=middleware");
  }
  if (!t.otlp_endpoint.empty()) {
    if (!t.metrics && t.tracing_ratio == 0) {
      return InvalidArgumentError("--otlp-endpoint needs --metrics or --tracing-ratio");
    }
    if (auto e = telemetry::ParseOtlpEndpoint(t.otlp_endpoint); !e.ok()) {
      return InvalidArgumentError("--otlp-endpoint: " + e.status().message());
    }
  }
  return OkStatus();
}

int RunServerMain(int argc, char** argv, std::string_view program, std::string_view description,
                  const std::function<void(Server&)>& routes, const ServerMainHooks& hooks) {
  ServerOptions options;
  bool help = false;
  bool version = false;
  Status parsed = ParseServerFlags(argc, argv, &options, &help, &version);
  if (version) {
    std::fputs(VersionText(program).c_str(), stdout);
    return 0;
  }
  if (help) {
    std::fputs(ServerUsage(program, description).c_str(), stdout);
    return 0;
  }
  if (!parsed.ok()) {
    std::fprintf(stderr, "%.*s: %s\n\n%s", static_cast<int>(program.size()), program.data(),
                 parsed.message().c_str(), ServerUsage(program, description).c_str());
    return 2;
  }
  // Every thread the server starts inherits this mask; the signals are
  // taken synchronously below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (hooks.configure) hooks.configure(options);
  ServerStats stats;
  {
    Server server(options);
    routes(server);
    if (Status s = server.Start(); !s.ok()) {
      // What the user gave is wrong (a certificate or key file missing, unreadable, not PEM or
      // not matching; a file to write that cannot be; an address not of this host): 2, as for a
      // bad flag. Anything else (a port in use, no permission to bind, out of resources): 1.
      const bool bad_input =
          s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound;
      std::fprintf(stderr, "%.*s: cannot start: %s\n", static_cast<int>(program.size()),
                   program.data(), bad_input ? s.message().c_str() : s.ToString().c_str());
      return bad_input ? 2 : 1;
    }
    if (!server.transport_note().empty()) {
      std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()), program.data(),
                   server.transport_note().c_str());
    }
    std::printf("%s\n", server.ReadyLine().c_str());
    std::fflush(stdout);
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    std::fprintf(stderr, "%.*s: %s, shutting down\n", static_cast<int>(program.size()),
                 program.data(), strsignal(signal_number));
    server.Shutdown();
    stats = server.stats();
  }
  // What was served, for whoever started the server (a test comparing its client's count).
  std::fprintf(stderr, "%.*s: stopped: requests=%llu connections=%llu handler_failures=%llu\n",
               static_cast<int>(program.size()), program.data(),
               static_cast<unsigned long long>(stats.requests),
               static_cast<unsigned long long>(stats.accepted + stats.h2_connections),
               static_cast<unsigned long long>(stats.handler_failures));
  return hooks.after_stop ? hooks.after_stop(stats) : 0;
}

}  // namespace sluice
