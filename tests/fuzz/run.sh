#!/usr/bin/env bash
# Builds the libFuzzer target over the parsers of untrusted text -- spec text, spec JSON, kernel
# names, scale schemes and calibrations, tuning tables, cache entries (clang++ with
# -fsanitize=fuzzer,address,undefined) in a fresh temporary folder and runs it.
#   tests/fuzz/run.sh [--binary FUZZER] [SECONDS=60] [more libFuzzer options...]
# --binary runs a fuzzer built already (a clang++ sanitizer build's gmmgen_spec_fuzzer) instead.
# Exits non-zero on any finding (crash, leak, undefined behaviour, an exception other than
# gmmgen::SpecError, a broken round trip); the crashing input is printed in base64; 77 (skipped)
# without clang++. Needs clang, libfuzzer-14-dev and libclang-rt-14-dev (Debian 12), plus
# gmm-gen's own build dependencies.
# CXX/CC override the compilers (default clang++/clang).
set -euo pipefail
fuzzer=
if [ "${1:-}" = --binary ]; then
  fuzzer=$2
  shift 2
fi
seconds=${1:-60}
[ $# -gt 0 ] && shift
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "$fuzzer" ] && ! command -v "${CXX:-clang++}" >/dev/null; then
  echo "fuzz: skipped: no ${CXX:-clang++} (libFuzzer needs clang; Debian: apt-get install clang)"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/gmmgen-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ -z "$fuzzer" ]; then
  echo "fuzz: building in $work"
  # The repository as a clang++ sanitizer build, of which only the fuzzer and what it links.
  # -O1 -g1: quick to build, line numbers in a finding's stack.
  if ! cmake -S "$here/../.." -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
       -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" \
       -DCMAKE_CXX_COMPILER="${CXX:-clang++}" -DCMAKE_C_COMPILER="${CC:-clang}" \
       -DGMMGEN_SANITIZE=ON -DGMMGEN_PYTHON=OFF -DGMMGEN_BUILD_EXAMPLES=OFF \
       -DGMMGEN_TEST_KERNELS=smoke >"$work/build.log" 2>&1 ||
     ! cmake --build "$work/build" --target gmmgen_spec_fuzzer >>"$work/build.log" 2>&1; then
    cat "$work/build.log"
    echo "fuzz: the build failed" >&2
    exit 1
  fi
  fuzzer=$work/build/tests/gmmgen_spec_fuzzer
fi

# New inputs go to a scratch corpus (first folder); the checked-in seeds are only read.
mkdir "$work/corpus" "$work/artifacts"
status=0
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
  -max_len=65536 -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$@" \
  "$work/corpus" "$here/corpus" >"$work/fuzz.log" 2>&1 || status=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log" | tail -n 1)
if [ "$status" -ne 0 ]; then
  tail -n 80 "$work/fuzz.log"
  for f in "$work"/artifacts/*; do
    [ -e "$f" ] || continue
    echo "fuzz: finding $(basename "$f") (base64):"
    base64 "$f"
  done
  echo "fuzz: FINDING after ${runs:-?} executions (exit $status)" >&2
  exit 1
fi
grep '^fuzz: ' "$work/fuzz.log" || true  # the executions of each parser
echo "fuzz: ${runs:-0} executions in ${seconds} s, no finding"
