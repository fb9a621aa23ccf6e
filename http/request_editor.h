// The protocol side of a Request: what a connection fills in from the wire (method, path,
// headers, body source...) and what a dispatcher adds once a route matched (its template and
// path parameters). Handlers only read a Request (http/exchange.h); these setters are kept out
// of its public API so that a handler cannot rewrite what the peer sent, and this header is not
// one of the installed public headers.
//
//   http::RequestEditor edit(request);
//   edit.Reset();
//   edit.SetMethod("GET");
//   edit.AddHeader("accept", "*/*");
//
// An editor is a reference to one Request and costs nothing beyond the calls it forwards (and,
// after StoreHead, where that head lies). A protocol that receives a head in one piece (HTTP/1.1)
// copies it whole once, then sets the fields from views into it, which are not copied again:
//
//   http::RequestEditor edit(request);
//   edit.Reset();
//   edit.StoreHead(head_bytes);        // one copy
//   edit.SetMethod(method_in_head);    // no copy: a view into head_bytes
//
// Thread-safety: as the Request it edits: used by the one thread that owns the exchange.
#ifndef SLUICE_HTTP_REQUEST_EDITOR_H_
#define SLUICE_HTTP_REQUEST_EDITOR_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/transport_info.h"
#include "http/exchange.h"

namespace sluice::http {

// Edits one Request (see the file comment). Does not own it.
class RequestEditor {
 public:
  explicit RequestEditor(Request& request) : r_(request) {}

  // Clears everything, keeping capacity.
  void Reset() {
    r_.Reset();
    head_ = {};
  }
  // Copies `head` into the request's storage (after what is stored already). Until Reset, the
  // copying setters below store a view that lies within `head` as a reference into that copy
  // instead of copying it again; other views are copied as usual. One copy of a whole head is
  // cheaper than one per field (each a string append). `head` must stay unchanged while this
  // editor uses it.
  void StoreHead(std::string_view head) {
    head_offset_ = r_.Store(head).offset;
    head_ = head;
  }
  // The bytes of the fields stored so far (method, path, authority, headers...).
  size_t stored_bytes() const { return r_.storage_.size(); }
  // The heap bytes the request keeps across Reset (for pools that bound what they keep).
  size_t retained_bytes() const {
    return r_.storage_.capacity() +
           (r_.headers_.capacity() + r_.params_.capacity()) * sizeof(r_.headers_[0]);
  }
  // The head of `from` (method, path, query, authority, scheme and header fields), copied over
  // this request's; what a connection sets apart (protocol version, peer, transport) and what
  // comes later (body, route) are left as they are. For a connection that receives the same head
  // again (HTTP/2's repeated header blocks): one copy instead of one per field.
  void CopyHead(const Request& from) {
    r_.storage_.assign(from.storage_);
    r_.method_ = from.method_;
    r_.path_ = from.path_;
    r_.query_ = from.query_;
    r_.authority_ = from.authority_;
    r_.scheme_ = from.scheme_;
    r_.headers_.assign(from.headers_.begin(), from.headers_.end());
  }
  // The method (copied).
  void SetMethod(std::string_view v) { r_.method_ = Store(v); }
  // The path before '?' (copied).
  void SetPath(std::string_view v) { r_.path_ = Store(v); }
  // The query after '?' (copied).
  void SetQuery(std::string_view v) { r_.query_ = Store(v); }
  // Host or :authority (copied).
  void SetAuthority(std::string_view v) { r_.authority_ = Store(v); }
  // "http" or "https": a literal, not copied.
  void SetScheme(std::string_view v) { r_.scheme_ = v; }
  // "1.0", "1.1" or "2": a literal, not copied.
  void SetProtocolVersion(std::string_view v) { r_.protocol_version_ = v; }
  // Owned by the connection, which outlives its exchanges.
  void SetPeerAddress(std::string_view v) { r_.peer_address_ = v; }
  // The connection's facts (must outlive the request's use; null: none known).
  void SetTransportInfo(const TransportInfo* info) { r_.transport_info_ = info; }
  // One header field (copied).
  void AddHeader(std::string_view name, std::string_view value) {
    r_.headers_.emplace_back(Store(name), Store(value));
  }
  // Whether a body follows, its declared length, and where ReadBody gets it from.
  void SetBody(bool has_body, std::optional<uint64_t> content_length, BodySource* source) {
    r_.has_body_ = has_body;
    r_.content_length_ = content_length;
    r_.body_source_ = source;
  }
  // The template of the route that matched (the router's, which outlives the request).
  void SetRoute(std::string_view route_template) { r_.route_ = route_template; }
  // Counts body bytes received (read by the handler or discarded), for telemetry.
  void AddBodyBytes(uint64_t n) { r_.body_bytes_ += n; }
  // A path parameter of the matched route (copied).
  void AddPathParam(std::string_view name, std::string_view value) {
    r_.params_.emplace_back(r_.Store(name), r_.Store(value));
  }

 private:
  // `v` as a slice of the request's storage: within the stored head if it lies in head_, else
  // copied.
  Request::Slice Store(std::string_view v) {
    // Addresses as integers: `v` may point anywhere, and pointers into different objects do not
    // compare. Unsigned, so a view before head_ wraps to a large `at` and fails the test.
    const uintptr_t at =
        reinterpret_cast<uintptr_t>(v.data()) - reinterpret_cast<uintptr_t>(head_.data());
    if (at <= head_.size() && v.size() <= head_.size() - at) {
      return {head_offset_ + static_cast<uint32_t>(at), static_cast<uint32_t>(v.size())};
    }
    return r_.Store(v);
  }

  Request& r_;
  // The head StoreHead copied (empty: none), and where its copy starts in the storage.
  std::string_view head_;
  uint32_t head_offset_ = 0;
};

}  // namespace sluice::http

#endif  // SLUICE_HTTP_REQUEST_EDITOR_H_
