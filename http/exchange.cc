#include "http/exchange.h"

#include <algorithm>

#include "core/ascii.h"
#include "core/bytes.h"

namespace sluice::http {

Request::Slice Request::Store(std::string_view v) {
  Slice s{static_cast<uint32_t>(storage_.size()), static_cast<uint32_t>(v.size())};
  storage_.append(v);
  return s;
}

std::string_view Request::Header(std::string_view lowercase_name) const {
  for (const auto& [name, value] : headers_) {
    if (EqualsLowercase(View(name), lowercase_name)) return View(value);
  }
  return {};
}

std::string_view Request::PathParam(std::string_view name) const {
  for (const auto& [n, v] : params_) {
    if (View(n) == name) return View(v);
  }
  return {};
}

void Request::ReadBody(BodyDataCallback on_data, BodyEndCallback on_end) {
  if (body_requested_) {
    on_end(FailedPreconditionError("Request::ReadBody called twice"));
    return;
  }
  body_requested_ = true;
  if (!has_body_ || body_source_ == nullptr) {
    on_end(OkStatus());
    return;
  }
  body_source_->StartBody(std::move(on_data), std::move(on_end));
}

void Request::Reset() {
  storage_.clear();
  method_ = path_ = query_ = authority_ = Slice{};
  scheme_ = "http";
  protocol_version_ = "1.1";
  peer_address_ = {};
  transport_info_ = nullptr;
  route_ = {};
  headers_.clear();
  params_.clear();
  has_body_ = false;
  content_length_.reset();
  body_bytes_ = 0;
  body_source_ = nullptr;
  body_requested_ = false;
}

// An exchange still reported here never ended: its connection went away (or the server stopped)
// first. The sink may be gone too, so it is not asked.
Response::~Response() { AbandonTelemetry(); }

void Response::AbandonTelemetrySlow() {
  sink_ = nullptr;
  if (telemetry_.error == telemetry::ErrorType::kNone) {
    telemetry::Hooks::Error(telemetry_, telemetry::ErrorType::kAborted, 0);
  }
  StopTelemetry();
}

void Response::Reset(ResponseSink* sink) {
  AbandonTelemetry();
  sink_ = sink;
  status_ = 200;
  header_count_ = 0;
  body_.clear();
  head_sent_ = ended_ = deferred_ = peer_gone_ = false;
  body_bytes_ = 0;
  on_end_.clear();
  on_end_run_ = 0;
  // The records are reset by whoever starts using them (BeginTelemetry, the middleware): with
  // nobody listening, an exchange costs them nothing.
}

size_t Response::retained_bytes() const {
  size_t n = body_.capacity() + headers_.capacity() * sizeof(headers_[0]) +
             on_end_.capacity() * sizeof(on_end_[0]);
  for (const auto& [name, value] : headers_) n += name.capacity() + value.capacity();
  return n;
}

void Response::BeginTelemetry(telemetry::Hooks* hooks, const Request& request) {
  if (hooks == nullptr || !hooks->active()) return;
  FillStart(telemetry_, request);
  hooks->Start(telemetry_);
}

void Response::FillStart(telemetry::ExchangeRecord& record, const Request& request) {
  record.error = telemetry::ErrorType::kNone;
  record.error_code = 0;
  record.status = 0;
  record.attribute_codes = 0;
  record.request = &request;
  record.method = request.method();
  record.route = request.route();
  record.scheme = request.scheme();
  record.protocol_version = request.protocol_version();
  record.peer_address = request.peer_address();
}

void Response::ReportError(telemetry::ErrorType type, uint32_t code) {
  telemetry::Hooks::Error(telemetry_, type, code);
}

void Response::FillStop(telemetry::ExchangeRecord& record) const {
  record.status = status_;
  if (sink_ != nullptr) {
    const ResponseSink::Error e = sink_->exchange_error();
    if (e.type() != telemetry::ErrorType::kNone && record.error == telemetry::ErrorType::kNone) {
      record.error = e.type();
      record.error_code = e.code();
    }
    if (e.status_sent() != 0) record.status = e.status_sent();
  }
  record.response_body_bytes = body_bytes_;
  if (record.request != nullptr) {
    record.request_body_bytes =
        std::max(record.request->body_bytes(), record.request->content_length().value_or(0));
  }
}

void Response::StopTelemetry() {
  if (telemetry_.hooks == nullptr) return;
  const telemetry::ErrorType before = telemetry_.error;
  FillStop(telemetry_);
  if (telemetry_.error != before) {
    // Found by the protocol (on its thread): reported now, from the Response's.
    telemetry::Hooks::Error(telemetry_, telemetry_.error, telemetry_.error_code);
  }
  telemetry::Hooks::Stop(telemetry_);
}

void Response::Finishing() {
  // Callbacks may add callbacks: run by index, each moved out first, since adding may move the
  // vector's callbacks (and a Callback keeps its capture in place) while it runs.
  for (; on_end_run_ < on_end_.size(); ++on_end_run_) {
    Callback<void(Response&)> fn = std::move(on_end_[on_end_run_]);
    fn(*this);
  }
  StopTelemetry();
}

void Response::SetHeader(std::string_view name, std::string_view value) {
  if (head_sent_) return;
  if (header_count_ < headers_.size()) {
    // A handler sets the same fields on every exchange, so the slot kept from the last one often
    // holds them already: comparing is cheaper than assign (a general replace).
    auto& [slot_name, slot_value] = headers_[header_count_];
    if (!BytesEqual(slot_name, name)) slot_name.assign(name);
    if (!BytesEqual(slot_value, value)) slot_value.assign(value);
  } else {
    headers_.emplace_back(std::string(name), std::string(value));
  }
  ++header_count_;
}

bool Response::SendHeadNow(bool end) {
  std::optional<uint64_t> length;
  if (end) length = body_.size();
  head_sent_ = true;
  if (telemetry_.hooks != nullptr) {
    telemetry_.status = status_;
    telemetry::Hooks::Head(telemetry_);
  }
  const std::span<const uint8_t> body(reinterpret_cast<const uint8_t*>(body_.data()), body_.size());
  if (end) {
    Finishing();
    // The last use of *this (see End).
    return sink_->SendHead(status_, std::span(headers_.data(), header_count_), length, body, true);
  }
  bool ok = sink_->SendHead(status_, std::span(headers_.data(), header_count_), length, body,
                            /*end=*/false);
  body_.clear();
  if (!ok) peer_gone_ = true;
  return ok;
}

bool Response::Write(std::span<const uint8_t> data) {
  CountProgress();
  if (ended_ || peer_gone_) return false;
  body_bytes_ += data.size();
  if (!head_sent_) {
    if (body_.size() + data.size() <= kStreamThreshold) {
      body_.append(reinterpret_cast<const char*>(data.data()), data.size());
      return true;
    }
    if (!SendHeadNow(/*end=*/false)) return false;
  }
  if (data.empty()) return true;
  if (!sink_->SendData(data, /*end=*/false)) peer_gone_ = true;
  return !peer_gone_;
}

bool Response::Flush() {
  CountProgress();
  if (ended_ || peer_gone_) return false;
  if (!head_sent_) return SendHeadNow(/*end=*/false);
  return true;
}

void Response::End() {
  if (ended_) return;
  CountProgress();
  ended_ = true;
  // The sink's call that ends the exchange is the last use of *this: it may
  // release the exchange (a deferred one is kept alive only until it ends),
  // so nothing is recorded after it. ended_ makes every later call a no-op.
  if (!head_sent_ && !peer_gone_) {
    SendHeadNow(/*end=*/true);
    return;
  }
  Finishing();
  // After a lost peer too: the sink still needs to learn the exchange is over.
  sink_->SendData({}, /*end=*/true);
}

void Response::Fail() {
  if (ended_) return;
  CountProgress();
  ReportError(telemetry::ErrorType::kHandlerFailure, 500);
  deferred_ = false;
  if (!head_sent_) {
    status_ = 500;
    header_count_ = 0;
    body_.clear();
    body_bytes_ = 0;
    SetHeader("content-type", "text/plain");
    Write(std::string_view("Internal Server Error\n"));
    End();
    return;
  }
  ended_ = true;
  Finishing();
  // The last use of *this (see End).
  sink_->AbortResponse();
}

void RunHandler(const Handler& handler, Request& req, Response& res,
                std::atomic<uint64_t>& failures) {
  bool threw = false;
  try {
    handler(req, res);
  } catch (...) {
    threw = true;  // answered below, outside the handler of the exception
  }
  if (threw) {
    failures.fetch_add(1, std::memory_order_relaxed);
    res.Fail();
  } else if (!res.deferred()) {
    res.End();
  }
}

}  // namespace sluice::http
