"""The headers an embedder includes: what the API reference documents (//docs/api) and where
the installer (//:install) starts, installing every project header they reach."""

PUBLIC_HEADERS = [
    "//core:status.h",
    "//core:version.h",
    "//http:exchange.h",
    "//http:middleware.h",
    "//http:router.h",
    "//servers:server.h",
    "//servers:server_main.h",
    "//telemetry:telemetry.h",
]
