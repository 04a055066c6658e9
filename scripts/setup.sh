#!/usr/bin/env bash
# Install dependencies (as root), build Hodu, and run an example program.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then
    scripts/install-deps.sh
else
    sudo scripts/install-deps.sh
fi
scripts/build.sh build
./build/hodu examples/hello.hodu
