#include "telemetry/hooks.h"

#include <algorithm>
#include <string>

#include "core/tick_clock.h"

namespace sluice::telemetry {

// The listeners subscribed at one moment, by the event they take. `owners` keeps them alive as
// long as the list (the registry's lifetime), for exchanges in flight after an Unsubscribe.
struct Hooks::List : ListenersByEvent {
  std::vector<std::shared_ptr<Listener>> owners;
};

namespace {

constexpr std::string_view kHttp2Codes[] = {"NO_ERROR",
                                            "PROTOCOL_ERROR",
                                            "INTERNAL_ERROR",
                                            "FLOW_CONTROL_ERROR",
                                            "SETTINGS_TIMEOUT",
                                            "STREAM_CLOSED",
                                            "FRAME_SIZE_ERROR",
                                            "REFUSED_STREAM",
                                            "CANCEL",
                                            "COMPRESSION_ERROR",
                                            "CONNECT_ERROR",
                                            "ENHANCE_YOUR_CALM",
                                            "INADEQUATE_SECURITY",
                                            "HTTP_1_1_REQUIRED"};

// "500".."599", for error.type of a 5xx answer.
struct StatusNames {
  StatusNames() {
    for (int i = 0; i < 100; ++i) text[i] = std::to_string(500 + i);
  }
  std::string text[100];
};

}  // namespace

std::string_view ErrorTypeName(ErrorType type, uint32_t code, bool http2) {
  switch (type) {
    case ErrorType::kNone:
      return "";
    case ErrorType::kProtocolError:
      if (http2 && code < std::size(kHttp2Codes)) return kHttp2Codes[code];
      return "protocol_error";
    case ErrorType::kPeerReset:
      return "peer_reset";
    case ErrorType::kTimeout:
      return "timeout";
    case ErrorType::kHandlerFailure:
      return "handler_failure";
    case ErrorType::kAborted:
      return "aborted";
  }
  return "";
}

std::string_view ExchangeRecord::ErrorTypeTextSlow() const {
  if (error != ErrorType::kNone) return ErrorTypeName(error, error_code, http2());
  if (status >= 500 && status < 600) {
    static const StatusNames names;
    return names.text[status - 500];
  }
  return "";
}

void ListenersByEvent::Add(Listener* listener) {
  ++added;
  const uint8_t events = listener->events();
  if (events & kStartEvents) start.push_back(listener);
  if (events & kHeadEvents) head.push_back(listener);
  if (events & kErrorEvents) error.push_back(listener);
  const bool reads_duration = (events & kStopIgnoresDuration) == 0;
  if (events & kStopEvents) {
    stop.push_back(listener);
    stop_reads_duration |= reads_duration;
  } else if (events & kSampledStopEvents) {
    sampled_stop.push_back(listener);
    sampled_stop_reads_duration |= reads_duration;
  }
  // Whether each list's listeners all take kNoThrow, kept as the count of those that do not.
  if ((events & kNoThrow) == 0) {
    if (events & kStartEvents) ++guarded_start;
    if (events & (kStopEvents | kSampledStopEvents)) ++guarded_stop;
  }
  sole_start = start.size() == 1 && guarded_start == 0 ? start[0] : nullptr;
  sole_stop = stop.size() == 1 && sampled_stop.empty() && guarded_stop == 0 && !stop_reads_duration
                  ? stop[0]
                  : nullptr;
}

Hooks::Hooks() = default;
Hooks::~Hooks() = default;

uint64_t Hooks::Subscribe(std::shared_ptr<Listener> listener) {
  MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  subscribed_.emplace_back(id, std::move(listener));
  Publish();
  return id;
}

void Hooks::Unsubscribe(uint64_t id) {
  MutexLock lock(&mu_);
  auto it = std::find_if(subscribed_.begin(), subscribed_.end(),
                         [id](const auto& entry) { return entry.first == id; });
  if (it == subscribed_.end()) return;
  subscribed_.erase(it);
  Publish();
}

size_t Hooks::listener_count() const {
  MutexLock lock(&mu_);
  return subscribed_.size();
}

void Hooks::Publish() {
  auto list = std::make_unique<List>();
  for (const auto& [id, listener] : subscribed_) {
    list->owners.push_back(listener);
    list->Add(listener.get());
  }
  const bool any = !subscribed_.empty();
  current_.store(any ? list.get() : nullptr, std::memory_order_release);
  active_.store(any, std::memory_order_relaxed);
  lists_.push_back(std::move(list));
}

void Hooks::Failed() { failures_.fetch_add(1, std::memory_order_relaxed); }

// Each call is guarded: a listener that throws must not break the exchange (the header's
// contract), and the other listeners still hear the event.
template <typename Call>
void Hooks::Each(const std::vector<Listener*>& listeners, Call call) {
  for (Listener* listener : listeners) {
    try {
      call(*listener);
    } catch (...) {
      Failed();
    }
  }
}

// The start and the stop call a sole listener (ListenersByEvent::sole_start, sole_stop) as their
// last step, with nothing to guard or undo after it, so the call is a jump and the event site
// keeps no frame of its own; anything else goes through the guarded loops below.
void Hooks::StartSlow(ExchangeRecord& record) {
  const List* list = current_.load(std::memory_order_acquire);
  if (list == nullptr) return;  // the last listener left since active() was read
  record.hooks = this;
  record.listeners = list;
  record.head_reported = list->head.empty();  // nobody takes it: the head site skips the call
  record.start_ticks = TickClock::PassTicksOrNow();  // see ExchangeRecord::start_ticks
  if (list->sole_start != nullptr) return list->sole_start->OnRequestStart(record);
  StartEach(list, record);
}

void Hooks::StartEach(const List* list, ExchangeRecord& record) {
  Each(list->start, [&](Listener& l) { l.OnRequestStart(record); });
}

void Hooks::HeadSlow(ExchangeRecord& record) {
  record.head_reported = true;
  Each(static_cast<const List*>(record.listeners)->head,
       [&](Listener& l) { l.OnResponseHead(record); });
}

void Hooks::ErrorSlow(ExchangeRecord& record, ErrorType type, uint32_t code) {
  record.error = type;
  record.error_code = code;
  Each(static_cast<const List*>(record.listeners)->error, [&](Listener& l) { l.OnError(record); });
}

void Hooks::StopSlow(ExchangeRecord& record) {
  const List* list = static_cast<const List*>(record.listeners);
  if (list->sole_stop != nullptr) {
    // Detached first: the listener reads neither field, and the call is the last step.
    record.duration_ns = 0;
    record.hooks = nullptr;
    record.listeners = nullptr;
    return list->sole_stop->OnRequestStop(record);
  }
  StopEach(list, record);
}

void Hooks::StopEach(const List* list, ExchangeRecord& record) {
  record.duration_ns = list->StopReadsDuration(record)
                           ? TickClock::ToNanos(TickClock::Now() - record.start_ticks)
                           : 0;
  Each(list->stop, [&](Listener& l) { l.OnRequestStop(record); });
  if (record.trace.sampled) Each(list->sampled_stop, [&](Listener& l) { l.OnRequestStop(record); });
  record.hooks = nullptr;
  record.listeners = nullptr;
}

void Hooks::Rejected(ExchangeRecord record, ErrorType type, uint32_t code) {
  Start(record);
  if (record.hooks == nullptr) return;
  if (type != ErrorType::kNone) ErrorSlow(record, type, code);
  StopSlow(record);
}

}  // namespace sluice::telemetry
