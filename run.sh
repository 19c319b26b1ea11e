#!/usr/bin/env bash
# The main job, as one command: installs the Debian packages that are missing (.ci/deps; run as
# root, or with all of them installed), builds gmm-gen without the tests, emits the default
# kernel set (generated/specs.json) into the build folder, and verifies every kernel of it
# against the float64 reference, printing one line per kernel.
#
#   ./run.sh [verify options]      e.g. ./run.sh --quick, ./run.sh --filter 'tgmm_*' -j 4
#
# BUILD_DIR (default build-main) names the build folder. The exit status is verify's: 0 every
# kernel passed, 1 a kernel computed wrong results or did not compile, 2 invalid input.
set -euo pipefail
cd "$(dirname "$0")"
build=${BUILD_DIR:-build-main}

step() { printf '\n== %s\n' "$*"; }

step "dependencies (.ci/deps)"
.ci/deps

step "build: $build (no tests)"
cmake -S . -B "$build" -G Ninja -DGMMGEN_BUILD_TESTS=OFF
cmake --build "$build"

gmm_gen="$build/bin/gmm-gen"
step "emit: generated/specs.json -> $build/default_kernels"
"$gmm_gen" emit --spec-file generated/specs.json --out "$build/default_kernels" \
  --bundle default_kernels

step "verify: generated/specs.json"
exec "$gmm_gen" verify --spec-file generated/specs.json "$@"
