#include "telemetry/trace_context.h"

#include <algorithm>
#include <vector>

namespace sluice::telemetry {
namespace {

int LowerHex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // uppercase is invalid in traceparent
}

template <size_t N>
bool ParseHex(std::string_view text, std::array<uint8_t, N>* out) {
  if (text.size() != 2 * N) return false;
  for (size_t i = 0; i < N; ++i) {
    const int hi = LowerHex(text[2 * i]);
    const int lo = LowerHex(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& a) {
  return std::all_of(a.begin(), a.end(), [](uint8_t b) { return b == 0; });
}

bool IsLcAlpha(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsKeyChar(char c) {
  return IsLcAlpha(c) || IsDigit(c) || c == '_' || c == '-' || c == '*' || c == '/';
}

// simple-key = lcalpha 0*255(keychar); multi-tenant = (lcalpha / DIGIT) 0*240(keychar) "@"
// lcalpha 0*13(keychar).
bool ValidKey(std::string_view key) {
  const size_t at = key.find('@');
  if (at == std::string_view::npos) {
    if (key.empty() || key.size() > 256 || !IsLcAlpha(key[0])) return false;
    return std::all_of(key.begin() + 1, key.end(), IsKeyChar);
  }
  const std::string_view tenant = key.substr(0, at);
  const std::string_view system = key.substr(at + 1);
  if (tenant.empty() || tenant.size() > 241 || !(IsLcAlpha(tenant[0]) || IsDigit(tenant[0]))) {
    return false;
  }
  if (system.empty() || system.size() > 14 || !IsLcAlpha(system[0])) return false;
  return std::all_of(tenant.begin() + 1, tenant.end(), IsKeyChar) &&
         std::all_of(system.begin() + 1, system.end(), IsKeyChar);
}

// value = 0*255(chr) nblk-chr; chr = %x20 / nblk-chr; nblk-chr = %x21-2B / %x2D-3C / %x3E-7E.
bool ValidValue(std::string_view value) {
  if (value.empty() || value.size() > 256 || value.back() == ' ') return false;
  return std::all_of(value.begin(), value.end(),
                     [](char c) { return c >= 0x20 && c <= 0x7e && c != ',' && c != '='; });
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<TraceParent> ParseTraceParent(std::string_view v) {
  // version(2) - trace(32) - parent(16) - flags(2) = 55 characters.
  if (v.size() < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-') return std::nullopt;
  std::array<uint8_t, 1> version{};
  std::array<uint8_t, 1> flags{};
  TraceParent p;
  if (!ParseHex(v.substr(0, 2), &version) || !ParseHex(v.substr(3, 32), &p.trace_id) ||
      !ParseHex(v.substr(36, 16), &p.parent_id) || !ParseHex(v.substr(53, 2), &flags)) {
    return std::nullopt;
  }
  if (version[0] == 0xff || AllZero(p.trace_id) || AllZero(p.parent_id)) return std::nullopt;
  if (version[0] == 0x00 && v.size() != 55) return std::nullopt;
  // A later version may append fields, after a '-'.
  if (v.size() > 55 && v[55] != '-') return std::nullopt;
  p.version = version[0];
  p.flags = flags[0];
  return p;
}

std::string HexId(const uint8_t* bytes, size_t size) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * size, '0');
  for (size_t i = 0; i < size; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 15];
  }
  return out;
}

std::string FormatTraceParent(const std::array<uint8_t, 16>& trace_id,
                              const std::array<uint8_t, 8>& span_id, bool sampled) {
  return "00-" + HexId(trace_id.data(), 16) + "-" + HexId(span_id.data(), 8) +
         (sampled ? "-01" : "-00");
}

std::optional<TraceState> ParseTraceState(std::string_view v) {
  std::vector<std::string_view> members;
  TraceState out;
  size_t at = 0;
  while (at <= v.size()) {
    size_t comma = v.find(',', at);
    if (comma == std::string_view::npos) comma = v.size();
    const std::string_view member = TrimOws(v.substr(at, comma - at));
    at = comma + 1;
    if (member.empty()) continue;  // empty members are allowed and ignored
    const size_t eq = member.find('=');
    if (eq == std::string_view::npos || !ValidKey(member.substr(0, eq)) ||
        !ValidValue(member.substr(eq + 1))) {
      return std::nullopt;
    }
    members.push_back(member);
  }
  if (members.size() > 32) {
    members.resize(32);
    out.truncated = true;
  }
  auto combined = [&members] {
    size_t n = 0;
    for (std::string_view m : members) n += m.size();
    return n + (members.empty() ? 0 : members.size() - 1);
  };
  // Over 512 characters: first the members longer than 128 go (from the end), then members from
  // the end until it fits.
  for (size_t i = members.size(); combined() > 512 && i-- > 0;) {
    if (members[i].size() > 128) {
      members.erase(members.begin() + static_cast<std::ptrdiff_t>(i));
      out.truncated = true;
    }
  }
  while (combined() > 512) {
    members.pop_back();
    out.truncated = true;
  }
  for (std::string_view m : members) {
    if (!out.value.empty()) out.value += ',';
    out.value.append(m);
  }
  return out;
}

}  // namespace sluice::telemetry
