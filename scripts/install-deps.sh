#!/usr/bin/env bash
# Install the Debian packages Hodu builds and tests with (run as root).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
    build-essential cmake pkg-config ca-certificates \
    libopenblas-dev re2c bison libedit-dev zlib1g-dev llvm-dev \
    >/dev/null
