#!/bin/bash
# --run_under wrapper of --config=tsan: runs the test with address-space randomization off.
#
# GCC 12's TSan runtime (libtsan2) expects the memory layout of kernels whose mmap randomization is
# at most 28 bits; with vm.mmap_rnd_bits=32 (some newer kernels) a TSan binary dies at start with
# "FATAL: ThreadSanitizer: unexpected memory mapping". Running it with ASLR off (`setarch -R`)
# avoids that. Where personality(ADDR_NO_RANDOMIZE) is not allowed (e.g. a container seccomp
# profile), the test runs as it is.
arch="$(uname -m)"
if setarch "$arch" -R true 2>/dev/null; then
  exec setarch "$arch" -R "$@"
fi
exec "$@"
