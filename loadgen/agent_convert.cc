#include "loadgen/agent_convert.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::loadgen {

namespace {

using std::chrono::nanoseconds;

StatusOr<int> IntField(std::string_view field, int32_t value, int min) {
  if (value < min) {
    return InvalidArgumentError("spec." + std::string(field) + " must be at least " +
                                std::to_string(min) + ", got " + std::to_string(value));
  }
  return static_cast<int>(value);
}

StatusOr<nanoseconds> DurationField(std::string_view field, int64_t ns) {
  if (ns < 0) {
    return InvalidArgumentError(std::string(field) + " must not be negative, got " +
                                std::to_string(ns) + " ns");
  }
  return nanoseconds(ns);
}

StatusOr<Histogram> HistogramField(std::string_view field, const std::string& bytes) {
  if (bytes.empty()) return InvalidArgumentError("result." + std::string(field) + " is missing");
  StatusOr<Histogram> h = Histogram::Deserialize(bytes);
  if (!h.ok()) {
    return InvalidArgumentError("result." + std::string(field) + ": " + h.status().message());
  }
  return h;
}

}  // namespace

void LoadSpecToProto(const LoadSpec& spec, v1::LoadSpec* out) {
  out->Clear();
  out->set_address(spec.address);
  out->set_authority(spec.authority);
  out->set_method(spec.method);
  out->set_path(spec.path);
  for (const auto& [name, value] : spec.headers) {
    v1::Header* header = out->add_headers();
    header->set_name(name);
    header->set_value(value);
  }
  out->set_body(spec.body);
  out->set_connections(spec.connections);
  out->set_threads(spec.threads);
  out->set_requests(spec.requests);
  out->set_duration_ns(spec.duration.count());
  out->set_warmup_ns(spec.warmup.count());
  out->set_rate(spec.rate);
  out->set_pipeline(spec.pipeline);
  out->set_protocol(spec.protocol == Protocol::kHttp2 ? v1::PROTOCOL_HTTP2 : v1::PROTOCOL_HTTP1);
  out->set_max_streams(spec.max_streams);
  out->set_tls(spec.tls);
  out->set_insecure(spec.insecure);
  out->set_timeout_ns(spec.timeout.count());
  if (spec.transport != IoBackend::kDefault) out->set_transport(IoBackendName(spec.transport));
}

StatusOr<LoadSpec> LoadSpecFromProto(const v1::LoadSpec& proto) {
  LoadSpec spec;
  spec.address = proto.address();
  spec.authority = proto.authority();
  spec.method = proto.method();
  spec.path = proto.path();
  spec.headers.reserve(static_cast<size_t>(proto.headers_size()));
  for (const v1::Header& header : proto.headers()) {
    spec.headers.emplace_back(header.name(), header.value());
  }
  spec.body = proto.body();

  // Negative counts are representable in the struct but never meaningful; the upper bounds are
  // ValidateSpec's.
  StatusOr<int> connections = IntField("connections", proto.connections(), 0);
  if (!connections.ok()) return connections.status();
  spec.connections = *connections;
  StatusOr<int> threads = IntField("threads", proto.threads(), 0);
  if (!threads.ok()) return threads.status();
  spec.threads = *threads;
  StatusOr<int> pipeline = IntField("pipeline", proto.pipeline(), 0);
  if (!pipeline.ok()) return pipeline.status();
  spec.pipeline = *pipeline;
  StatusOr<int> max_streams = IntField("max_streams", proto.max_streams(), 0);
  if (!max_streams.ok()) return max_streams.status();
  spec.max_streams = *max_streams;
  spec.requests = proto.requests();

  StatusOr<nanoseconds> duration = DurationField("spec.duration_ns", proto.duration_ns());
  if (!duration.ok()) return duration.status();
  spec.duration = *duration;
  StatusOr<nanoseconds> warmup = DurationField("spec.warmup_ns", proto.warmup_ns());
  if (!warmup.ok()) return warmup.status();
  spec.warmup = *warmup;
  StatusOr<nanoseconds> timeout = DurationField("spec.timeout_ns", proto.timeout_ns());
  if (!timeout.ok()) return timeout.status();
  spec.timeout = *timeout;

  spec.rate = proto.rate();
  switch (proto.protocol()) {
    case v1::PROTOCOL_HTTP1:
      spec.protocol = Protocol::kHttp1;
      break;
    case v1::PROTOCOL_HTTP2:
      spec.protocol = Protocol::kHttp2;
      break;
    default:
      return InvalidArgumentError("spec.protocol: unknown value " +
                                  std::to_string(static_cast<int>(proto.protocol())));
  }
  spec.tls = proto.tls();
  spec.insecure = proto.insecure();
  if (!proto.transport().empty()) {
    StatusOr<IoBackend> transport = ParseIoBackend(proto.transport());
    if (!transport.ok()) {
      return InvalidArgumentError("spec.transport: " + transport.status().message());
    }
    spec.transport = *transport;
  }
  return spec;
}

void RunResultToProto(const RunResult& result, v1::RunResultProto* out) {
  out->Clear();
  out->set_requests_sent(result.requests_sent);
  out->set_requests_completed(result.requests_completed);
  out->set_requests_failed(result.requests_failed);
  out->set_requests_unfinished(result.requests_unfinished);
  out->set_requests_unsent(result.requests_unsent);
  for (size_t code = 0; code < result.status_codes.size(); ++code) {
    if (result.status_codes[code] != 0) {
      (*out->mutable_status_codes())[static_cast<uint32_t>(code)] = result.status_codes[code];
    }
  }
  out->set_bytes_written(result.bytes_written);
  out->set_bytes_read(result.bytes_read);
  v1::ErrorCounts* errors = out->mutable_errors();
  errors->set_connect(result.errors.connect);
  errors->set_read(result.errors.read);
  errors->set_write(result.errors.write);
  errors->set_timeout(result.errors.timeout);
  errors->set_bad_response(result.errors.bad_response);
  out->set_connections_opened(result.connections_opened);
  out->set_reconnects(result.reconnects);
  out->set_connect_latency(result.connect_latency.Serialize());
  out->set_tls_handshakes(result.tls_handshakes);
  out->set_interim_responses(result.interim_responses);
  out->set_duration_ns(result.duration.count());
  out->set_start_unix_ns(result.start_unix_ns);
  out->set_latency(result.latency.Serialize());
  out->set_corrected_latency(result.corrected_latency.Serialize());
  out->set_first_error(result.first_error);
}

StatusOr<RunResult> RunResultFromProto(const v1::RunResultProto& proto) {
  RunResult result;
  result.requests_sent = proto.requests_sent();
  result.requests_completed = proto.requests_completed();
  result.requests_failed = proto.requests_failed();
  result.requests_unfinished = proto.requests_unfinished();
  result.requests_unsent = proto.requests_unsent();
  for (const auto& [code, count] : proto.status_codes()) {
    if (code < 100 || code >= result.status_codes.size()) {
      return InvalidArgumentError("result.status_codes: code " + std::to_string(code) +
                                  " is not in 100..599");
    }
    result.status_codes[code] = count;
  }
  result.bytes_written = proto.bytes_written();
  result.bytes_read = proto.bytes_read();
  result.errors.connect = proto.errors().connect();
  result.errors.read = proto.errors().read();
  result.errors.write = proto.errors().write();
  result.errors.timeout = proto.errors().timeout();
  result.errors.bad_response = proto.errors().bad_response();
  result.connections_opened = proto.connections_opened();
  result.reconnects = proto.reconnects();
  StatusOr<Histogram> connect_latency = HistogramField("connect_latency", proto.connect_latency());
  if (!connect_latency.ok()) return connect_latency.status();
  result.connect_latency = std::move(connect_latency).value();
  result.tls_handshakes = proto.tls_handshakes();
  result.interim_responses = proto.interim_responses();
  StatusOr<nanoseconds> duration = DurationField("result.duration_ns", proto.duration_ns());
  if (!duration.ok()) return duration.status();
  result.duration = *duration;
  if (proto.start_unix_ns() < 0) {
    return InvalidArgumentError("result.start_unix_ns: negative");
  }
  result.start_unix_ns = proto.start_unix_ns();
  StatusOr<Histogram> latency = HistogramField("latency", proto.latency());
  if (!latency.ok()) return latency.status();
  result.latency = std::move(latency).value();
  StatusOr<Histogram> corrected = HistogramField("corrected_latency", proto.corrected_latency());
  if (!corrected.ok()) return corrected.status();
  result.corrected_latency = std::move(corrected).value();
  result.first_error = proto.first_error();
  return result;
}

}  // namespace sluice::loadgen
