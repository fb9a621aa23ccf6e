// W3C Trace Context (level 1): the traceparent and tracestate headers, parsed and validated to the
// letter, because they come from the network.
//
//   traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
//                version-trace_id-parent_id-flags, lowercase hex only
//
// A traceparent is invalid (and a server starts a new root trace, counting it, never refusing the
// request) when: a field has the wrong length or a character that is not lowercase hex, the
// version is ff, the trace id or the parent id is all zeros, version 00 has anything after the
// flags, or a later version has something after the flags that does not start with '-'.
// Several traceparent fields in one request are invalid too.
//
// tracestate is only read next to a valid traceparent. Its list members (key=value, separated by
// commas and optional spaces) are checked against the key and value grammar; a malformed member
// makes the whole header ignored. At most 32 members are kept, and a combined value longer than
// 512 characters is cut the way the specification asks: first members longer than 128
// characters are dropped, then members from the end, until it fits.
//
// Thread contract: stateless functions.
#ifndef SLUICE_TELEMETRY_TRACE_CONTEXT_H_
#define SLUICE_TELEMETRY_TRACE_CONTEXT_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::telemetry {

struct TraceParent {
  uint8_t version = 0;
  std::array<uint8_t, 16> trace_id{};
  std::array<uint8_t, 8> parent_id{};
  uint8_t flags = 0;
  bool sampled() const { return (flags & 1) != 0; }
};

// The traceparent in `value`, or nullopt if it is invalid (see the file comment).
std::optional<TraceParent> ParseTraceParent(std::string_view value);

// "00-<trace>-<span>-<flags>".
std::string FormatTraceParent(const std::array<uint8_t, 16>& trace_id,
                              const std::array<uint8_t, 8>& span_id, bool sampled);

struct TraceState {
  std::string value;       // the members kept, joined by ","
  bool truncated = false;  // members were dropped (over 32, or over 512 characters)
};

// The tracestate in `value` (already combined from several fields, comma-joined), or nullopt if
// a member is malformed.
std::optional<TraceState> ParseTraceState(std::string_view value);

// Lowercase hex of `bytes`.
std::string HexId(const uint8_t* bytes, size_t size);

}  // namespace sluice::telemetry

#endif  // SLUICE_TELEMETRY_TRACE_CONTEXT_H_
