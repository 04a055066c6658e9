#!/usr/bin/env bash
# Build and run the whole test suite: the normal build, then the same suite
# under AddressSanitizer + UndefinedBehaviorSanitizer, then the libFuzzer
# targets (clang): their corpora once, and HODU_FUZZ_SECONDS (60) of
# fuzzing each; any finding fails.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${HODU_JOBS:-$(nproc)}
scripts/build.sh build
ctest --test-dir build --output-on-failure -j "$jobs"
scripts/build.sh build-asan -DHODU_SANITIZE=ON
# intercept_tls_get_addr=0: the __tls_get_addr interceptor of GCC <= 13's
# sanitizer runtime (LLVM <= 16's too) mistakes a malloc'd block at offset
# 16 of a page for a pre-2.25 glibc TLS header and reads the words before
# it; LeakSanitizer's tracer then segfaults at exit ("Tracer caught signal
# 11"), now and then, after a test has passed.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:intercept_tls_get_addr=0 \
    UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs"
scripts/fuzz.sh "${HODU_FUZZ_SECONDS:-60}"
