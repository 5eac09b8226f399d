#!/usr/bin/env bash
# Side-by-side coverage decoding: pt-coverage, ptcov, iptr-edge-analyzer and libxdc on
# the same traces, all on one core (CPU time of the decoding thread).
#
#   benches/libxdc/compare.sh LIBXDC_SRC WORK_DIR [PERF_DATA...]
#
# LIBXDC_SRC: a checkout of nyx-fuzz/libxdc (this script downloads nothing); it is
# built in WORK_DIR (outside the repository) against Debian's libcapstone-dev, with
# benches/libxdc/harness.c. Then, each in a folder of WORK_DIR:
#   gen/     the generated workload: 10,000 separate runs of one program with
#            different inputs (1-50 KB each) and a 64 MB run, without return
#            compression and timing packets (every decoder's input);
#   genrc/   the same runs with return compression and timing packets (pt-coverage
#            only: the others cannot decode them), then pt-coverage on gen/ and
#            genrc/ in turn (--retcomp-cost);
#   json/    a real program recorded 10,000 times: benches/programs/json_parse.c
#            (a JSON parser run over mutated inputs, a system call before each)
#            built here and recorded once on the simulator (`ptperf record
#            --backend sim --source qemu -e intel_pt/noretcomp,tsc=0,mtc=0/u`,
#            about 1 G instructions: minutes); its runs (TIP.PGE to TIP.PGD) are
#            the fuzzing workload, the whole recording the long trace; skipped
#            with NO_JSON=1 or without qemu-x86_64;
#   NAME/    for each PERF_DATA recorded with `ptperf record -e
#            intel_pt/noretcomp,tsc=0,mtc=0/u` (the packets libxdc accepts): 10,000
#            slices of the run and the whole trace.
# For each: MB/s and traces/s per decoder, and libxdc's bitmap against ours.
# CORE (default 1) picks the core.
set -euo pipefail
usage="usage: compare.sh LIBXDC_SRC WORK_DIR [PERF_DATA...]"
src=${1:?$usage}
work=${2:?$usage}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
core=${CORE:-1}
mkdir -p "$work"
work=$(cd "$work" && pwd)
case "$work" in
  "$repo"/*) echo "compare.sh: WORK_DIR must be outside the repository" >&2; exit 1 ;;
esac
[ -f /usr/include/capstone/capstone.h ] || { echo "compare.sh: needs libcapstone-dev" >&2; exit 1; }
mkdir -p "$work/libxdc"
cp -r "$src"/. "$work/libxdc/"
make -s -C "$work/libxdc" libxdc.a >/dev/null
cc -O3 -march=native -o "$work/harness" "$here/harness.c" -I"$work/libxdc" \
  "$work/libxdc/libxdc.a" -l:libcapstone.so.4
cd "$repo"
cargo build -q --release -p pt-benches --example coverage_compare
cmp=target/release/examples/coverage_compare
json=${NO_JSON:-}
command -v qemu-x86_64 >/dev/null || json=skip
if [ -z "$json" ]; then
  cargo build -q --release -p ptperf
  mkdir -p "$work/json"
  cc -O2 -g -o "$work/json/json_parse" benches/programs/json_parse.c
fi
run() { taskset -c "$core" "$@"; }
side_by_side() {
  run "$work/harness" "$1"
  run "$cmp" --compare-libxdc "$1"
}
echo "== generated: 10,000 runs and a 64 MB run (noretcomp, no timing)"
run "$cmp" --generate "$work/gen" --no-exact
side_by_side "$work/gen"
echo "== generated, the same runs with return compression and timing packets"
run "$cmp" --generate "$work/genrc" --retcomp-timing --ours-only --no-exact
echo "== what return compression and timing packets cost pt-coverage (the same runs, in turn)"
run "$cmp" --retcomp-cost "$work/gen" "$work/genrc"
if [ -z "$json" ]; then
  echo "== json_parse: 12,800 inputs recorded, the first 10,000 runs of 1-50 KB"
  [ -f "$work/json/json.data" ] || target/release/ptperf record --backend sim --source qemu \
    -e intel_pt/noretcomp,tsc=0,mtc=0/u -o "$work/json/json.data" -- "$work/json/json_parse" 12800
  run "$cmp" "$work/json/json.data" "$work/json/w" --whole-runs --no-exact
  side_by_side "$work/json/w"
fi
for data in "$@"; do
  name=$(basename "$data" .data)
  echo "== $data"
  run "$cmp" "$data" "$work/$name" --long-repeat 1 --no-exact
  side_by_side "$work/$name"
done
