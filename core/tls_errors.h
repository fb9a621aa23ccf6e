// Text for the Status messages of the TLS adapter (core/tls.h): the TLS library's error queue as
// one line, and names quoted as the messages show them. Internal to core's TLS sources, which all
// include this header; it also checks they were compiled against the headers of the TLS library
// the build links.
//
//   if (SSL_CTX_set_min_proto_version(context, version) != 1) {
//     return InternalError("SSL_CTX_set_min_proto_version: " + tls_internal::LibraryErrors());
//   }
//
// Thread contract: thread-safe (the library's error queue is per thread).
#ifndef SLUICE_CORE_TLS_ERRORS_H_
#define SLUICE_CORE_TLS_ERRORS_H_

#include <openssl/crypto.h>

#include <string>
#include <string_view>

#if defined(SLUICE_TLS_OPENSSL) == defined(OPENSSL_IS_BORINGSSL)
#error "core's TLS sources were compiled against the other TLS library's headers than they link"
#endif

namespace sluice::tls_internal {

// Drains this thread's error queue into one line ("error:...; error:..."), or says that the
// library reported nothing.
std::string LibraryErrors();

// `text` in double quotes, as messages show file names, host names and ALPN names.
std::string Quoted(std::string_view text);

}  // namespace sluice::tls_internal

#endif  // SLUICE_CORE_TLS_ERRORS_H_
