"""sluice bench: the benchmark driver (tools/README.md)."""
