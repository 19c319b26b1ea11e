#!/bin/sh
# tune_sweep: tunes every grouped product of the MoE example (examples/moe) for one configuration
# with `gmm-gen tune`, then runs the example again, printing both runs (issue 12, docs/tuning.md).
#
#   tune_sweep.sh GMM_GEN MOE_EXAMPLE [--budget SECONDS] [-j N] [--space SPACE] [-- MOE_ARGS...]
#
# 1. "before": the example runs with GMMGEN_LOG=1 in a fresh cache folder, so no tuning table
#    applies; the runtime logs each product it ran ("tuning: <problem> at <r> rows/group: no
#    table entry").
# 2. Each product is tuned at its rows per group: --dist decode (each row picks an expert at
#    random, as the router's top-k does) for expert products, uniform for the router's (G = 1).
#    The budget is shared equally by the products. The table goes to the cache folder's tuning/,
#    which the runtime reads.
# 3. "after": the example runs again; the runtime now logs the table entry each product used.
# Exits non-zero if a product tuned in step 2 did not use its entry in step 3.
set -eu

usage() {
  echo "usage: $0 GMM_GEN MOE_EXAMPLE [--budget SECONDS] [-j N] [--space SPACE] [-- MOE_ARGS...]" >&2
  exit 2
}
[ $# -ge 2 ] || usage
gmm_gen=$1
moe=$2
shift 2
budget=""
jobs=""
space=""
while [ $# -gt 0 ]; do
  case $1 in
    --budget) [ $# -ge 2 ] || usage; budget=$2; shift 2 ;;
    -j) [ $# -ge 2 ] || usage; jobs=$2; shift 2 ;;
    --space) [ $# -ge 2 ] || usage; space=$2; shift 2 ;;
    --) shift; break ;;
    *) usage ;;
  esac
done

work=$(mktemp -d "${TMPDIR:-/tmp}/tune_sweep.XXXXXX")
trap 'rm -rf "$work"' EXIT
GMMGEN_CACHE_DIR=$work/cache
export GMMGEN_CACHE_DIR
unset GMMGEN_TUNING_DIR || true

echo "== before: no tuning table"
GMMGEN_LOG=1 "$moe" "$@" >"$work/before.txt" 2>"$work/before.log"
cat "$work/before.txt"

# "<problem> <rows per group>" of every product, once each.
sed -n 's/^gmm-gen: tuning: \([^ ]*\) at \([0-9.]*\) rows\/group: no table entry.*/\1 \2/p' \
  "$work/before.log" | sort -u >"$work/products.txt"
count=$(wc -l <"$work/products.txt")
if [ "$count" -eq 0 ]; then
  echo "tune_sweep: the example logged no products (is GMMGEN_LOG supported?)" >&2
  exit 1
fi
echo
echo "== tuning $count products"
share=""
if [ -n "$budget" ]; then
  share=$(awk -v b="$budget" -v n="$count" 'BEGIN { s = b / n; printf "%.1f", s < 0.1 ? 0.1 : s }')
fi
# One product: its own positional parameters (a function's), so "$@" stays the example's.
tune_one() {
  g=$(echo "$1" | sed 's/.*,g=\([0-9]*\),.*/\1/')
  m=$(awk -v r="$2" -v g="$g" 'BEGIN { printf "%d", r * g + 0.5 }')
  dist=decode
  [ "$g" -gt 1 ] || dist=uniform
  set -- --spec "$1" --m "$m" --dist "$dist"
  [ -z "$share" ] || set -- "$@" --budget "$share"
  [ -z "$jobs" ] || set -- "$@" -j "$jobs"
  [ -z "$space" ] || set -- "$@" --space "$space"
  echo
  "$gmm_gen" tune "$@" </dev/null
}
while read -r problem rows; do
  tune_one "$problem" "$rows"
done <"$work/products.txt"

echo
echo "== after: with the tuning table"
GMMGEN_LOG=1 "$moe" "$@" >"$work/after.txt" 2>"$work/after.log"
cat "$work/after.txt"
echo
echo "== before and after"
grep -E '^(forward|backward)' "$work/before.txt" | sed 's/^/before /'
grep -E '^(forward|backward)' "$work/after.txt" | sed 's/^/after  /'
echo
echo "table entries the runtime used:"
grep '^gmm-gen: tuning: .* rows/group: .* from ' "$work/after.log" | sed 's/^gmm-gen: tuning: /  /'
missing=0
while read -r problem rows; do
  if ! grep -q "^gmm-gen: tuning: $problem at $rows rows/group: .* from " "$work/after.log"; then
    echo "tune_sweep: $problem at $rows rows/group used no table entry after tuning" >&2
    missing=$((missing + 1))
  fi
done <"$work/products.txt"
[ "$missing" -eq 0 ]
