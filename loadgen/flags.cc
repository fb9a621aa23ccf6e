#include "loadgen/flags.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

namespace sluice::loadgen {

namespace {

Status Bad(std::string_view message) { return InvalidArgumentError(message); }

StatusOr<uint64_t> ParseCount(std::string_view flag, std::string_view text) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Bad(std::string(flag) + ": not a non-negative integer: \"" + std::string(text) + "\"");
  }
  return v;
}

StatusOr<int> ParseInt(std::string_view flag, std::string_view text, int min, int max) {
  StatusOr<uint64_t> v = ParseCount(flag, text);
  if (!v.ok()) return v.status();
  if (*v < static_cast<uint64_t>(min) || *v > static_cast<uint64_t>(max)) {
    return Bad(std::string(flag) + ": must be in " + std::to_string(min) + ".." +
               std::to_string(max) + ", got " + std::string(text));
  }
  return static_cast<int>(*v);
}

StatusOr<double> ParseNumber(std::string_view flag, std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0 || !std::isfinite(v) || v < 0) {
    return Bad(std::string(flag) + ": not a non-negative number: \"" + s + "\"");
  }
  return v;
}

// The largest --body-file: the body is copied into every request sent.
constexpr size_t kMaxBodyFile = 64 << 20;

// The whole content of the file at `path` (a regular file or a pipe), for --body-file:
// INVALID_ARGUMENT saying why it cannot be used (missing, unreadable, a directory, too large).
StatusOr<std::string> ReadBodyFile(std::string_view flag, const std::string& path) {
  const std::string what = std::string(flag) + ": " + path + ": ";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Bad(what + "cannot read: " + std::strerror(errno));
  std::string error;
  std::string content;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    error = std::string("cannot read: ") + std::strerror(errno);
  } else if (S_ISDIR(st.st_mode)) {
    error = "is a directory";
  }
  char buffer[64 * 1024];
  while (error.empty()) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n == 0) break;
    if (n < 0) {
      if (errno != EINTR) error = std::string("cannot read: ") + std::strerror(errno);
      continue;
    }
    content.append(buffer, static_cast<size_t>(n));
    if (content.size() > kMaxBodyFile) error = "larger than 64 MiB";
  }
  close(fd);
  if (!error.empty()) return Bad(what + error);
  return content;
}

bool IsIpv4Literal(const std::string& host) {
  in_addr a;
  return inet_pton(AF_INET, host.c_str(), &a) == 1;
}

bool IsIpv6Literal(const std::string& host) {
  in6_addr a;
  return inet_pton(AF_INET6, host.c_str(), &a) == 1;
}

// http[s]://HOST[:PORT][/path[?query]] with HOST an IPv4 literal, [IPv6] literal or localhost.
Status ParseUrl(std::string_view url, LoadSpec* spec) {
  spec->tls = url.starts_with("https://");
  const std::string_view scheme = spec->tls ? "https://" : "http://";
  if (!url.starts_with(scheme)) {
    return Bad("URL must start with http:// or https://: \"" + std::string(url) + "\"");
  }
  std::string_view rest = url.substr(scheme.size());
  const size_t path_start = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, path_start);
  std::string_view path = path_start == std::string_view::npos ? "/" : rest.substr(path_start);
  if (const size_t hash = path.find('#'); hash != std::string_view::npos) {
    path = path.substr(0, hash);  // a fragment is never sent
  }
  if (path.empty() || path[0] == '?') {
    spec->path = "/" + std::string(path);
  } else {
    spec->path = std::string(path);
  }
  if (authority.empty()) return Bad("URL has no host: \"" + std::string(url) + "\"");
  if (authority.find('@') != std::string_view::npos) {
    return Bad("URL must not carry user information");
  }
  std::string host;
  std::string_view port = spec->tls ? "443" : "80";
  if (authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return Bad("URL: unterminated [IPv6] host");
    host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return Bad("URL: junk after the [IPv6] host");
      port = after.substr(1);
    }
    if (!IsIpv6Literal(host)) return Bad("URL: not an IPv6 literal: \"" + host + "\"");
  } else {
    const size_t colon = authority.rfind(':');
    host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  StatusOr<int> port_number = ParseInt("URL port", port, 1, 65535);
  if (!port_number.ok()) return port_number.status();
  std::string ip;
  if (authority.front() == '[') {
    ip = "[" + host + "]";
  } else if (host == "localhost") {
    ip = "127.0.0.1";
  } else if (IsIpv4Literal(host)) {
    ip = host;
  } else {
    return Bad("URL host must be an IPv4 or [IPv6] literal or localhost (no name resolution): \"" +
               host + "\"");
  }
  spec->address = ip + ":" + std::to_string(*port_number);
  spec->authority = std::string(authority);
  return OkStatus();
}

}  // namespace

std::string_view Usage() {
  return R"(Usage: loadgen [flags] URL

HTTP/1.1 and HTTP/2 load generator: keep-alive, pipelining, concurrent streams, TLS, closed loop
or constant rate with coordinated-omission correction, exact latency histograms.

URL: http[s]://HOST[:PORT][/path][?query]; HOST is an IPv4 literal, an [IPv6] literal or
localhost. https:// runs over TLS (the connection setup time is reported apart from latency).

Load:
  -c, --connections N   connections (default 10, at most 1000000); each needs a file descriptor:
                        more than the open-file limit (`ulimit -n`, raised to its hard limit
                        first) allows is refused
  -t, --threads N       event-loop threads; connections are spread over them (default 1)
  -n, --requests N      measured requests in total (instead of -d)
  -d, --duration D      measured duration (default 10s): 10s, 500ms, 2m, 1h, 1.5s
      --warmup D        load before measuring; not counted (default 0)
  -R, --rate R          constant rate in requests/s over all connections (at most 1e8); latency
                        is measured from each request's intended send time (corrected) and from
                        its actual send. Requests intended before -d ends but behind schedule
                        still go out after it, within the drain time (so their delay is
                        measured, not hidden); those still not sent then are counted unsent
      --pipeline N      HTTP/1.1: requests in flight per connection, written together (default 1)
      --timeout D       per-request timeout; the connection is closed and reopened (default 2s).
                        Also bounds connecting and the TLS handshake; when -d ends, answers still
                        in flight are awaited this long, at most 2s (then counted unfinished)
      --h1              HTTP/1.1 (default)
      --h2              HTTP/2: h2c by prior knowledge for http://, ALPN h2 for https://
  -m, --max-streams N   HTTP/2: concurrent streams per connection (default 1, like h2load)
      --transport T     epoll (default) or io_uring: one ring per thread, every connection's
                        sends and receives of a loop pass in one io_uring_enter
  -k, --insecure        https: do not verify the server's certificate

Request:
  -X, --method M        request method (default GET)
  -H, --header 'N: v'   add a header field (repeatable); a Host given here replaces the URL's
      --body S          request body (sent with Content-Length)
      --body-file F     request body read from file F (at most 64 MiB)

Output:
      --json[=FILE]     the full result as JSON (histograms base64-encoded) to stdout or FILE;
                        with JSON on stdout, the human summary goes to stderr. FILE is opened
                        (created if need be) before the run and written at its end
  -h, --help            this text
      --version         sluice's version and the pinned libraries loadgen was built with

A progress line (elapsed, completed, live RPS, errors) is drawn on stderr when it is a terminal.
Exit status: 0 run completed (some requests may have failed), 1 target unreachable (including
when every connection attempt of the run failed: connect or TLS handshake, none completed), run
failed, or the output (stdout, the JSON file) could not be written, 2 bad arguments.
)";
}

StatusOr<std::chrono::nanoseconds> ParseDuration(std::string_view text) {
  size_t unit_start = 0;
  while (unit_start < text.size() &&
         ((text[unit_start] >= '0' && text[unit_start] <= '9') || text[unit_start] == '.')) {
    ++unit_start;
  }
  const std::string_view number = text.substr(0, unit_start);
  const std::string_view unit = text.substr(unit_start);
  StatusOr<double> value = ParseNumber("duration", number);
  if (!value.ok() || number.empty()) {
    return Bad("not a duration (e.g. 10s, 500ms, 2m): \"" + std::string(text) + "\"");
  }
  double scale;
  if (unit.empty() || unit == "s") {
    scale = 1e9;
  } else if (unit == "ms") {
    scale = 1e6;
  } else if (unit == "us") {
    scale = 1e3;
  } else if (unit == "m") {
    scale = 60e9;
  } else if (unit == "h") {
    scale = 3600e9;
  } else {
    return Bad("unknown duration unit \"" + std::string(unit) + "\" (use us, ms, s, m or h)");
  }
  const double ns = *value * scale;
  if (ns > 1e18) return Bad("duration too long: \"" + std::string(text) + "\"");
  return std::chrono::nanoseconds(static_cast<int64_t>(std::llround(ns)));
}

StatusOr<CliOptions> ParseCommandLine(const std::vector<std::string_view>& args) {
  CliOptions options;
  LoadSpec& spec = options.spec;
  bool requests_given = false;
  bool duration_given = false;
  bool body_given = false;
  bool streams_given = false;
  std::vector<std::string_view> positional;

  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "--") {
      for (++i; i < args.size(); ++i) positional.push_back(args[i]);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      positional.push_back(arg);
      continue;
    }
    // Split "--name=value" and "-cVALUE".
    std::string_view name = arg;
    std::string_view inline_value;
    bool has_inline = false;
    if (arg.starts_with("--")) {
      if (const size_t eq = arg.find('='); eq != std::string_view::npos) {
        name = arg.substr(0, eq);
        inline_value = arg.substr(eq + 1);
        has_inline = true;
      }
    } else if (arg.size() > 2) {
      name = arg.substr(0, 2);
      inline_value = arg.substr(2);
      has_inline = true;
    }
    auto value = [&]() -> StatusOr<std::string_view> {
      if (has_inline) return inline_value;
      if (i + 1 >= args.size()) return Bad(std::string(name) + ": needs a value");
      return args[++i];
    };
    auto no_value = [&]() -> Status {
      if (has_inline) return Bad(std::string(name) + ": takes no value");
      return OkStatus();
    };
#define LOADGEN_VALUE(var)                  \
  StatusOr<std::string_view> var = value(); \
  if (!var.ok()) return var.status()

    if (name == "-h" || name == "--help") {
      if (Status s = no_value(); !s.ok()) return s;
      options.help = true;
    } else if (name == "--version") {
      if (Status s = no_value(); !s.ok()) return s;
      options.version = true;
    } else if (name == "-c" || name == "--connections") {
      LOADGEN_VALUE(v);
      StatusOr<int> n = ParseInt(name, *v, 1, kMaxConnections);
      if (!n.ok()) return n.status();
      spec.connections = *n;
    } else if (name == "-t" || name == "--threads") {
      LOADGEN_VALUE(v);
      StatusOr<int> n = ParseInt(name, *v, 1, 1024);
      if (!n.ok()) return n.status();
      spec.threads = *n;
    } else if (name == "-n" || name == "--requests") {
      LOADGEN_VALUE(v);
      StatusOr<uint64_t> n = ParseCount(name, *v);
      if (!n.ok()) return n.status();
      if (*n == 0) return Bad(std::string(name) + ": must be at least 1");
      spec.requests = *n;
      requests_given = true;
    } else if (name == "-d" || name == "--duration") {
      LOADGEN_VALUE(v);
      StatusOr<std::chrono::nanoseconds> d = ParseDuration(*v);
      if (!d.ok()) return Bad(std::string(name) + ": " + d.status().message());
      if (d->count() <= 0) return Bad(std::string(name) + ": must be positive");
      spec.duration = *d;
      duration_given = true;
    } else if (name == "--warmup") {
      LOADGEN_VALUE(v);
      StatusOr<std::chrono::nanoseconds> d = ParseDuration(*v);
      if (!d.ok()) return Bad(std::string(name) + ": " + d.status().message());
      spec.warmup = *d;
    } else if (name == "--timeout") {
      LOADGEN_VALUE(v);
      StatusOr<std::chrono::nanoseconds> d = ParseDuration(*v);
      if (!d.ok()) return Bad(std::string(name) + ": " + d.status().message());
      if (d->count() <= 0) return Bad(std::string(name) + ": must be positive");
      spec.timeout = *d;
    } else if (name == "-R" || name == "--rate") {
      LOADGEN_VALUE(v);
      StatusOr<double> r = ParseNumber(name, *v);
      if (!r.ok()) return r.status();
      if (*r <= 0) return Bad(std::string(name) + ": must be positive");
      if (*r > kMaxRate) {
        return Bad(std::string(name) + ": must be at most 100000000 (1e8) requests/s, got " +
                   std::string(*v));
      }
      spec.rate = *r;
    } else if (name == "--pipeline") {
      LOADGEN_VALUE(v);
      StatusOr<int> n = ParseInt(name, *v, 1, 1024);
      if (!n.ok()) return n.status();
      spec.pipeline = *n;
    } else if (name == "--h1") {
      if (Status s = no_value(); !s.ok()) return s;
    } else if (name == "--transport") {
      LOADGEN_VALUE(v);
      StatusOr<IoBackend> transport = ParseIoBackend(*v);
      if (!transport.ok()) return Bad("--transport: " + transport.status().message());
      spec.transport = *transport;
    } else if (name == "--h2") {
      if (Status s = no_value(); !s.ok()) return s;
      spec.protocol = Protocol::kHttp2;
    } else if (name == "-m" || name == "--max-streams") {
      LOADGEN_VALUE(v);
      StatusOr<int> n = ParseInt(name, *v, 1, 10000);
      if (!n.ok()) return n.status();
      spec.max_streams = *n;
      streams_given = true;
    } else if (name == "-k" || name == "--insecure") {
      if (Status s = no_value(); !s.ok()) return s;
      spec.insecure = true;
    } else if (name == "-H" || name == "--header") {
      LOADGEN_VALUE(v);
      const size_t colon = v->find(':');
      if (colon == std::string_view::npos || colon == 0) {
        return Bad(std::string(name) + ": expected 'Name: value', got \"" + std::string(*v) + "\"");
      }
      std::string_view field_value = v->substr(colon + 1);
      while (!field_value.empty() && (field_value.front() == ' ' || field_value.front() == '\t')) {
        field_value.remove_prefix(1);
      }
      while (!field_value.empty() && (field_value.back() == ' ' || field_value.back() == '\t')) {
        field_value.remove_suffix(1);
      }
      spec.headers.emplace_back(std::string(v->substr(0, colon)), std::string(field_value));
    } else if (name == "-X" || name == "--method") {
      LOADGEN_VALUE(v);
      spec.method = std::string(*v);
    } else if (name == "--body") {
      LOADGEN_VALUE(v);
      if (body_given) return Bad("--body/--body-file: given twice");
      spec.body = std::string(*v);
      body_given = true;
    } else if (name == "--body-file") {
      LOADGEN_VALUE(v);
      if (body_given) return Bad("--body/--body-file: given twice");
      StatusOr<std::string> content = ReadBodyFile(name, std::string(*v));
      if (!content.ok()) return content.status();
      spec.body = std::move(content).value();
      body_given = true;
    } else if (name == "--json") {
      options.json = true;
      if (has_inline) {
        if (inline_value.empty()) return Bad("--json=: needs a file name");
        options.json_file = std::string(inline_value);
      }
    } else {
      return Bad("unknown flag " + std::string(arg));
    }
#undef LOADGEN_VALUE
  }

  if (options.help || options.version) return options;
  if (positional.empty()) return Bad("missing the target URL");
  if (positional.size() > 1) {
    return Bad("one URL expected, got also \"" + std::string(positional[1]) + "\"");
  }
  if (requests_given && duration_given) return Bad("-n and -d exclude each other");
  if (streams_given && spec.protocol != Protocol::kHttp2) return Bad("-m needs --h2");
  if (spec.pipeline > 1 && spec.protocol == Protocol::kHttp2) {
    return Bad("--pipeline is HTTP/1.1 only; use -m with --h2");
  }
  options.url = std::string(positional[0]);
  if (Status s = ParseUrl(positional[0], &spec); !s.ok()) return s;
  if (spec.connections < spec.threads) {
    return Bad("-c (" + std::to_string(spec.connections) + ") must be at least -t (" +
               std::to_string(spec.threads) + ")");
  }
  if (Status s = ValidateSpec(spec); !s.ok()) return s;
  return options;
}

}  // namespace sluice::loadgen
