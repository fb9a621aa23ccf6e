#include "core/tls_errors.h"

#include <openssl/err.h>

#include "core/tls_context.h"

namespace sluice::tls_internal {

std::string LibraryErrors() {
  std::string text;
  while (const unsigned long error = ERR_get_error()) {
    char line[256];
    ERR_error_string_n(error, line, sizeof(line));
    if (!text.empty()) text += "; ";
    text += line;
  }
  if (text.empty()) text = "no error reported by " + std::string(TlsLibraryName());
  return text;
}

std::string Quoted(std::string_view text) { return "\"" + std::string(text) + "\""; }

}  // namespace sluice::tls_internal
