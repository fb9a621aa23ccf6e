// Fuzzes the request parser and the chunked decoder together, as a connection drives them:
// parse a head, skip or decode its body, parse the next pipelined request, until the input is
// used up or refused.
//
// Input: byte 0 chooses where the rest is split into two pipe segments; the rest is the stream.
// Every input runs twice, with the default limits and with small ones (so limit paths are hit).
//
// Checked, besides "no crash, no sanitizer report":
// - consumed counts stay inside the input, complete heads consume something, error codes are
//   the documented ones;
// - views of a head parsed from contiguous input point into that input;
// - the outcome does not depend on segmentation: the split pipe input gives the same results,
//   heads and bodies as the contiguous input;
// - the parser fed growing prefixes (resuming each time) ends with the result of one call over
//   the whole input;
// - the decoder fed one byte at a time gives the same body, trailers and outcome as fed at once.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/pipe.h"
#include "http1/chunked_decoder.h"
#include "http1/request_parser.h"
#include "http1/testing/split_input.h"

namespace sluice::http1 {
namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "request_parser_fuzz: invariant violated: %s\n", what);
  std::abort();
}

bool Inside(std::string_view v, std::string_view input) {
  return v.empty() ||
         (v.data() >= input.data() && v.data() + v.size() <= input.data() + input.size());
}

bool SameHead(const RequestHead& a, const RequestHead& b) {
  if (a.method != b.method || a.method_text != b.method_text || a.target != b.target ||
      a.path != b.path || a.query != b.query || a.version_minor != b.version_minor ||
      a.framing != b.framing || a.content_length != b.content_length ||
      a.keep_alive != b.keep_alive || a.expect_continue != b.expect_continue || a.host != b.host ||
      a.headers.size() != b.headers.size()) {
    return false;
  }
  for (size_t i = 0; i < a.headers.size(); ++i) {
    if (a.headers[i] != b.headers[i]) return false;
  }
  return true;
}

bool SameOutcome(const ParseOutcome& a, const ParseOutcome& b) {
  return a.status == b.status && a.consumed == b.consumed && a.status_code == b.status_code &&
         a.reason == b.reason;
}

bool SameOutcome(const ChunkedOutcome& a, const ChunkedOutcome& b) {
  return a.status == b.status && a.consumed == b.consumed && a.status_code == b.status_code &&
         a.reason == b.reason;
}

void CheckHeadInside(const RequestHead& head, std::string_view input) {
  for (std::string_view v : {head.method_text, head.target, head.query, head.host}) {
    Check(Inside(v, input), "head view outside the contiguous input");
  }
  // An absolute-form target without a path gets a static "/".
  Check(Inside(head.path, input) || head.path == "/", "path outside the contiguous input");
  for (const Header& h : head.headers) {
    Check(Inside(h.name, input) && Inside(h.value, input), "field outside the contiguous input");
  }
}

std::string Join(const std::vector<std::span<const uint8_t>>& data) {
  std::string out;
  for (std::span<const uint8_t> piece : data) {
    Check(!piece.empty(), "empty data span");
    out.append(reinterpret_cast<const char*>(piece.data()), piece.size());
  }
  return out;
}

// Decodes a chunked body at `offset` three ways and checks they agree. Returns the outcome.
ChunkedOutcome DecodeBody(const BufferSequence& split, std::string_view input, size_t offset,
                          const ChunkedLimits& limits) {
  const std::string_view rest = input.substr(offset);
  const std::span<const uint8_t> rest_bytes(reinterpret_cast<const uint8_t*>(rest.data()),
                                            rest.size());

  ChunkedDecoder whole(limits);
  std::vector<std::span<const uint8_t>> whole_data;
  const ChunkedOutcome r = whole.Decode(rest_bytes, &whole_data);
  Check(r.consumed <= rest.size(), "decoder consumed more than its input");
  Check(!r.error() || r.status_code == 400 || r.status_code == 413 || r.status_code == 431,
        "undocumented decoder status code");
  for (std::span<const uint8_t> piece : whole_data) {
    Check(Inside({reinterpret_cast<const char*>(piece.data()), piece.size()}, rest),
          "body data outside the input");
  }
  const std::string body = Join(whole_data);

  ChunkedDecoder segmented(limits);
  std::vector<std::span<const uint8_t>> segmented_data;
  const ChunkedOutcome s = segmented.Decode(split, offset, &segmented_data);
  Check(SameOutcome(r, s), "decoder outcome depends on segmentation");
  Check(Join(segmented_data) == body, "decoded body depends on segmentation");

  ChunkedDecoder bytewise(limits);
  std::string bytewise_body;
  size_t consumed = 0;
  ChunkedOutcome b;
  for (size_t i = 0; i < rest.size(); ++i) {
    std::vector<std::span<const uint8_t>> data;
    b = bytewise.Decode(rest_bytes.subspan(i, 1), &data);
    consumed += b.consumed;
    bytewise_body += Join(data);
    if (!b.need_more()) break;
  }
  if (!rest.empty()) {
    Check(b.status == r.status && b.status_code == r.status_code && b.reason == r.reason,
          "decoder outcome depends on feeding byte by byte");
    if (!r.error()) Check(consumed == r.consumed, "bytewise decoder consumed differently");
  }
  Check(bytewise_body == body, "decoded body depends on feeding byte by byte");
  if (r.done()) {
    Check(whole.trailers().size() == segmented.trailers().size() &&
              whole.trailers().size() == bytewise.trailers().size(),
          "trailer count depends on feeding");
    for (size_t i = 0; i < whole.trailers().size(); ++i) {
      Check(whole.trailers()[i] == segmented.trailers()[i] &&
                whole.trailers()[i] == bytewise.trailers()[i],
            "trailers depend on feeding");
    }
  }
  return r;
}

void Run(const BufferSequence& split, std::string_view input, const ParseLimits& parse_limits,
         const ChunkedLimits& chunked_limits) {
  RequestParser contiguous(parse_limits);
  RequestParser segmented(parse_limits);
  RequestHead a;
  RequestHead b;
  size_t offset = 0;
  for (int request = 0; offset < input.size(); ++request) {
    const ParseOutcome r = contiguous.Parse(input.substr(offset), &a);
    const ParseOutcome s = segmented.Parse(split, offset, &b);
    Check(r.consumed <= input.size() - offset, "parser consumed more than its input");
    Check(!r.complete() || r.consumed > 0, "a complete head consumed nothing");
    Check(!r.error() || r.status_code == 400 || r.status_code == 414 || r.status_code == 417 ||
              r.status_code == 431 || r.status_code == 501 || r.status_code == 505,
          "undocumented parser status code");
    Check(SameOutcome(r, s), "parse outcome depends on segmentation");

    if (request == 0) {
      // Growing prefixes through one parser (the resumed scan) end where one call does.
      RequestParser resumed(parse_limits);
      RequestHead c;
      ParseOutcome p;
      const size_t step = 1 + input.size() / 4096;  // keeps huge inputs linear-ish
      for (size_t k = 0; k < input.size();) {
        k = std::min(input.size(), k + step);
        p = resumed.Parse(input.substr(0, k), &c);
        if (!p.incomplete()) break;
      }
      Check(SameOutcome(p, r), "resumed parse differs from one-shot parse");
      if (r.complete()) Check(SameHead(a, c), "resumed head differs from one-shot head");
    }

    if (!r.complete()) return;
    CheckHeadInside(a, input.substr(offset));
    Check(SameHead(a, b), "parsed head depends on segmentation");
    offset += r.consumed;

    if (a.framing == BodyFraming::kContentLength) {
      if (a.content_length > input.size() - offset) return;
      offset += static_cast<size_t>(a.content_length);
    } else if (a.framing == BodyFraming::kChunked) {
      const ChunkedOutcome body = DecodeBody(split, input, offset, chunked_limits);
      if (!body.done()) return;
      offset += body.consumed;
    }
  }
}

}  // namespace
}  // namespace sluice::http1

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;  // NOLINT: a fuzz entry point
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  const http1::testing::SplitInput split(input, data[0]);

  http1::Run(split.buffer(), input, http1::ParseLimits{}, http1::ChunkedLimits{});
  http1::Run(split.buffer(), input,
             http1::ParseLimits{.max_request_line = 64,
                                .max_header_bytes = 256,
                                .max_header_count = 8,
                                .max_leading_empty_lines = 2},
             http1::ChunkedLimits{.max_body_bytes = 1024,
                                  .max_chunk_extension_bytes = 32,
                                  .max_trailer_bytes = 64,
                                  .max_trailer_count = 2});
  return 0;
}
