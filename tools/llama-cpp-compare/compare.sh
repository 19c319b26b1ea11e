#!/usr/bin/env bash
# End to end against llama.cpp: f32 activations and block-quantized weights in, f32 out, on the
# bench's standard shapes (S1-S4), 2 threads each. gmm-gen's side is `gmm-gen bench --quant` (its
# `e2e` column: Runtime::gmm with quantize_lhs, which quantizes the activations in the call); the
# other is llama.cpp's one MoE call, ggml_mul_mat_id (mul_mat_id.cpp), on the same group sizes
# (the bench's JSON `group_sizes`), with the weights of the same width: Q4_0 for i4 rows, Q8_0 for
# i8 rows (block:32 scales, as gmm-gen's default rows), in ggml's CPU_REPACK buffer where it has a
# layout for the type on this CPU and in a plain one, the faster compared. The two sides
# alternate in ROUNDS rounds (separate runs on a shared machine move by 10-30%); each round prints
# its times and ratios, the end the median ratio per row.
#
# usage: tools/llama-cpp-compare/compare.sh GMM_GEN [ROUNDS] [QUANT]
#   GMM_GEN  the gmm-gen binary (build/bin/gmm-gen)
#   ROUNDS   alternating rounds [3]
#   QUANT    gmm-gen's rows, as bench --quant takes them
#            [i8@block:32/i4@block:32,i8@block:32/i8@block:32]
# llama.cpp's sources: $LLAMA_CPP_DIR if set (a llama.cpp checkout: its ggml/ is built), else
# the sdist of the llama-cpp-python release pinned below (it vendors llama.cpp), from PyPI's
# simple index, checked against its pinned SHA-256. ggml is built with -march=native
# (GGML_NATIVE), in a fresh temporary folder, removed at the end.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '12,16p' "$0" >&2; exit 2; }
gmm_gen=$(realpath "$1")
rounds=${2:-3}
quant=${3:-i8@block:32/i4@block:32,i8@block:32/i8@block:32}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ROUNDS=$rounds must be a positive integer" >&2; exit 2; }
[ -x "$gmm_gen" ] || { echo "GMM_GEN=$1 is not an executable" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
llama_cpp_python=0.3.36  # vendors ggml 0.25.3
llama_cpp_python_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

work=$(mktemp -d)  # under $TMPDIR where set
trap 'rm -rf "$work"' EXIT

src=${LLAMA_CPP_DIR:-}
if [ -z "$src" ]; then
  echo "== fetching llama-cpp-python $llama_cpp_python (llama.cpp's sources) from PyPI"
  # Straight from the index: `pip download` of an sdist would build its build backend first.
  python3 - "$llama_cpp_python" "$llama_cpp_python_sha256" "$work/sdist.tar.gz" <<'EOF'
import hashlib, re, sys, urllib.request
version, sha256, path = sys.argv[1:]
index = urllib.request.urlopen("https://pypi.org/simple/llama-cpp-python/", timeout=60).read()
name = re.escape(f"llama_cpp_python-{version}.tar.gz")
url = re.search(rf'href="([^"#]*/{name})[#"]', index.decode()).group(1)
data = urllib.request.urlopen(url, timeout=600).read()
if hashlib.sha256(data).hexdigest() != sha256:
    sys.exit(f"{url}: SHA-256 {hashlib.sha256(data).hexdigest()}, expected {sha256}")
open(path, "wb").write(data)
EOF
  tar -xzf "$work/sdist.tar.gz" -C "$work"
  src=$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)
  # The sdist leaves out the pkg-config template ggml's CMake configures.
  [ -f "$src/ggml/ggml.pc.in" ] || : >"$src/ggml/ggml.pc.in"
fi
echo "== building ggml (CPU backend, -march=native) from $src"
cmake -S "$src/ggml" -B "$work/ggml" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DGGML_OPENMP=ON -DGGML_BACKEND_DL=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_BUILD_TESTS=OFF \
  -DGGML_BUILD_EXAMPLES=OFF >"$work/cmake.log" || { cat "$work/cmake.log"; exit 1; }
cmake --build "$work/ggml" -j "$(nproc)" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
c++ -O2 -std=c++17 -I"$src/ggml/include" "$here/mul_mat_id.cpp" "$work/ggml/src/libggml.a" \
  "$work/ggml/src/libggml-cpu.a" "$work/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl -lm \
  -o "$work/mul_mat_id"

: >"$work/ratios.txt"
for round in $(seq "$rounds"); do
  echo "== round $round: gmm-gen bench --shapes all --quant $quant"
  "$gmm_gen" bench --shapes all --quant "$quant" --baseline none --reps 5 \
    --json "$work/bench.json" >"$work/bench.txt" || { cat "$work/bench.txt"; exit 1; }
  # One line per row: shape k n e2e_ms dtypes rhs sizes.
  python3 - "$work/bench.json" >"$work/rows.txt" <<'EOF'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    if r.get("end_to_end_ms"):
        name = f'{r["lhs"]}@{r["lhs_quant"]}x{r["rhs"]}@{r["rhs_quant"]}'
        print(r["shape"], r["k"], r["n"], r["end_to_end_ms"], name, r["rhs"],
              ",".join(map(str, r["group_sizes"])))
EOF
  declare -A llama_ms=()
  while read -r shape k n e2e name rhs sizes; do
    case $rhs in
      i4) type=q4_0 ;;
      i8) type=q8_0 ;;
      *) echo "$shape $name: llama.cpp has no $rhs weights to compare with; skipped" && continue ;;
    esac
    if [ -z "${llama_ms[$shape/$type]:-}" ]; then
      best='' layout=''
      for repack in 1 0; do
        status=0
        times=$("$work/mul_mat_id" "$k" "$n" "$type" "$repack" 2 5 "$sizes" 2>"$work/err") ||
          status=$?
        [ "$status" = 3 ] && continue  # ggml has no CPU_REPACK layout for the type here
        [ "$status" = 0 ] || { cat "$work/err" >&2; exit 1; }
        ms=${times%% *}
        if [ -z "$best" ] || awk -v a="$ms" -v b="$best" 'BEGIN { exit !(a < b) }'; then
          best=$ms layout=$([ "$repack" = 1 ] && echo repacked || echo plain)
        fi
      done
      llama_ms[$shape/$type]="$best $type $layout"
    fi
    read -r lms ltype llayout <<<"${llama_ms[$shape/$type]}"
    awk -v s="$shape" -v n="$name" -v e="$e2e" -v l="$lms" -v lk="$ltype $llayout" \
      -v out="$work/ratios.txt" 'BEGIN {
        printf "%s %-30s gmm-gen e2e %9.3f ms  llama.cpp %9.3f ms (%s)  ratio %5.2f\n", s, n, e, l,
          lk, l / e
        printf "%s|%s|%.4f\n", s, n, l / e >>out
      }'
  done <"$work/rows.txt"
  unset llama_ms
done
if [ ! -s "$work/ratios.txt" ]; then
  echo "no --quant $quant row has an end-to-end time (integer activations) and i4 or i8 weights" >&2
  exit 1
fi
echo "== median ratio (llama.cpp's time over gmm-gen's) over $rounds rounds"
python3 - "$work/ratios.txt" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    shape, name, ratio = line.strip().split("|")
    rows.setdefault((shape, name), []).append(float(ratio))
for (shape, name), r in rows.items():
    print(f"{shape} {name:30s} {statistics.median(r):5.2f}  (rounds: {min(r):.2f}-{max(r):.2f})")
EOF
