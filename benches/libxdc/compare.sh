#!/usr/bin/env bash
# Side-by-side coverage decoding: pt-coverage, ptcov, iptr-edge-analyzer and libxdc on
# the same traces, one core.
#
#   benches/libxdc/compare.sh LIBXDC_SRC PERF_DATA [WORK_DIR]
#
# LIBXDC_SRC: a checkout of nyx-fuzz/libxdc (this script downloads nothing); it is
# built in WORK_DIR (default: a temporary folder outside the repository) against
# Debian's libcapstone-dev. PERF_DATA: a recording made with
# `ptperf record -e intel_pt/noretcomp,tsc=0,mtc=0/u` (the packets libxdc accepts).
set -euo pipefail
src=${1:?usage: compare.sh LIBXDC_SRC PERF_DATA [WORK_DIR]}
data=${2:?usage: compare.sh LIBXDC_SRC PERF_DATA [WORK_DIR]}
work=${3:-$(mktemp -d /tmp/libxdc-compare.XXXXXX)}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
case "$(cd "$work" 2>/dev/null && pwd || echo "$work")" in
  "$repo"/*) echo "compare.sh: WORK_DIR must be outside the repository" >&2; exit 1 ;;
esac
[ -f /usr/include/capstone/capstone.h ] || { echo "compare.sh: needs libcapstone-dev" >&2; exit 1; }
mkdir -p "$work/libxdc" "$work/traces"
cp -r "$src"/. "$work/libxdc/"
make -s -C "$work/libxdc" libxdc.a >/dev/null
cc -O3 -march=native -o "$work/harness" "$here/harness.c" -I"$work/libxdc" \
  "$work/libxdc/libxdc.a" -l:libcapstone.so.4
cd "$repo"
cargo build -q --release -p pt-benches --example coverage_compare
# One core for every decoder.
run() { taskset -c 0 "$@"; }
run target/release/examples/coverage_compare "$data" "$work/traces"
run "$work/harness" "$work/traces"
run target/release/examples/coverage_compare --compare-libxdc "$work/traces"
