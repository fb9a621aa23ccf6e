// Fuzzes the response parser and the chunked decoder together, as the load generator drives
// them: parse a response head, skip or decode its body as the framing says, parse the next
// pipelined response, until the input is used up or refused.
//
// Input: byte 0 chooses where the rest is split into two pipe segments; bit 0 of byte 1 says the
// responses answer HEAD requests; the rest (from byte 2) is the stream. Every input runs twice,
// with the default limits and with small ones (so the limit paths are hit).
//
// Checked, besides "no crash, no sanitizer report":
// - consumed counts stay inside the input, complete heads consume something, status codes are in
//   100..599 and errors carry INVALID_ARGUMENT or RESOURCE_EXHAUSTED;
// - views of a head parsed from contiguous input point into that input;
// - the outcome does not depend on segmentation: the split pipe input gives the same results and
//   heads as the contiguous input;
// - the parser fed growing prefixes (resuming each time) ends with the result of one call over
//   the whole input.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>
#include <vector>

#include "core/pipe.h"
#include "http1/chunked_decoder.h"
#include "http1/response_parser.h"
#include "http1/testing/split_input.h"

namespace sluice::http1 {
namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "response_parser_fuzz: invariant violated: %s\n", what);
  std::abort();
}

bool Inside(std::string_view v, std::string_view input) {
  return v.empty() ||
         (v.data() >= input.data() && v.data() + v.size() <= input.data() + input.size());
}

bool SameHead(const ResponseHead& a, const ResponseHead& b) {
  if (a.status_code != b.status_code || a.reason != b.reason ||
      a.version_minor != b.version_minor || a.framing != b.framing ||
      a.content_length != b.content_length || a.keep_alive != b.keep_alive ||
      a.headers.size() != b.headers.size()) {
    return false;
  }
  for (size_t i = 0; i < a.headers.size(); ++i) {
    if (a.headers[i] != b.headers[i]) return false;
  }
  return true;
}

bool SameOutcome(const ResponseParseOutcome& a, const ResponseParseOutcome& b) {
  return a.status == b.status && a.consumed == b.consumed &&
         a.interim_responses == b.interim_responses && a.error_code == b.error_code &&
         a.reason == b.reason;
}

void Run(const BufferSequence& split, std::string_view input, bool head_request,
         const ResponseParseLimits& limits) {
  ResponseParser contiguous(limits);
  ResponseParser segmented(limits);
  ResponseHead a;
  ResponseHead b;
  size_t offset = 0;
  for (int response = 0; offset < input.size(); ++response) {
    const ResponseParseOutcome r = contiguous.Parse(input.substr(offset), head_request, &a);
    const ResponseParseOutcome s = segmented.Parse(split, offset, head_request, &b);
    Check(r.consumed <= input.size() - offset, "parser consumed more than its input");
    Check(!r.complete() || r.consumed > 0, "a complete head consumed nothing");
    Check(!r.error() || r.error_code == StatusCode::kInvalidArgument ||
              r.error_code == StatusCode::kResourceExhausted,
          "undocumented error code");
    Check(SameOutcome(r, s), "parse outcome depends on segmentation");

    if (response == 0) {
      // Growing prefixes through one parser (the resumed scan) end where one call does.
      ResponseParser resumed(limits);
      ResponseHead c;
      ResponseParseOutcome p;
      const size_t step = 1 + input.size() / 4096;  // keeps huge inputs linear-ish
      for (size_t k = 0; k < input.size();) {
        k = std::min(input.size(), k + step);
        p = resumed.Parse(input.substr(0, k), head_request, &c);
        if (!p.incomplete()) break;
      }
      Check(SameOutcome(p, r), "resumed parse differs from one-shot parse");
      if (r.complete()) Check(SameHead(a, c), "resumed head differs from one-shot head");
    }

    if (!r.complete()) return;
    Check(a.status_code >= 100 && a.status_code <= 599, "status code out of range");
    Check(a.status_code >= 200 || a.status_code == 101, "an interim head was returned");
    Check(Inside(a.reason, input.substr(offset)), "reason outside the contiguous input");
    for (const Header& h : a.headers) {
      Check(Inside(h.name, input.substr(offset)) && Inside(h.value, input.substr(offset)),
            "field outside the contiguous input");
    }
    Check(SameHead(a, b), "parsed head depends on segmentation");
    offset += r.consumed;

    switch (a.framing) {
      case ResponseFraming::kNone:
        if (a.status_code == 101) return;  // another protocol follows
        break;
      case ResponseFraming::kContentLength:
        if (a.content_length > input.size() - offset) return;
        offset += static_cast<size_t>(a.content_length);
        break;
      case ResponseFraming::kChunked: {
        ChunkedDecoder whole;
        ChunkedDecoder pieces;
        std::vector<std::span<const uint8_t>> data;
        const std::string_view rest = input.substr(offset);
        const ChunkedOutcome w = whole.Decode(
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(rest.data()), rest.size()),
            &data);
        data.clear();
        const ChunkedOutcome q = pieces.Decode(split, offset, &data);
        Check(w.status == q.status && w.consumed == q.consumed, "body depends on segmentation");
        if (!w.done()) return;
        offset += w.consumed;
        break;
      }
      case ResponseFraming::kUntilClose:
        Check(!a.keep_alive, "a close-delimited response is keep-alive");
        return;
    }
  }
}

}  // namespace
}  // namespace sluice::http1

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;  // NOLINT: a fuzz entry point
  if (size < 2) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data + 2), size - 2);
  const http1::testing::SplitInput split(input, data[0]);
  const bool head_request = (data[1] & 1) != 0;

  http1::Run(split.buffer(), input, head_request, http1::ResponseParseLimits{});
  http1::Run(split.buffer(), input, head_request,
             http1::ResponseParseLimits{.max_status_line = 32,
                                        .max_header_bytes = 128,
                                        .max_header_count = 4,
                                        .max_interim_responses = 2});
  return 0;
}
