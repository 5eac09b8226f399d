#!/usr/bin/env bash
# `ptperf record` on the simulated PT CPU, source by source, side by side in
# one run: instructions per second of the whole recording (program, recorder
# and the perf.data written), for gzip of 1 MB and a python3 workload, and
# the same programs run natively. A benchmark, not a test: it prints a table.
#
#   benches/scripts/record-sources.sh [--quick]
#
# The ptrace source single-steps (tens of thousands of instructions per
# second) and the valgrind source runs at a few hundred thousand: they record
# the first PTRACE_LIMIT instructions (`--limit`) and a smaller gzip input
# (VALGRIND_KB; python3's start-up only) unless FULL=1; their rate is that
# of what they recorded. Rates are wall-clock: on a loaded machine, run it
# twice or look at `uptime` first.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -q -p ptperf
PTPERF=$PWD/target/release/ptperf
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
PTRACE_LIMIT=${PTRACE_LIMIT:-2000000}
VALGRIND_KB=${VALGRIND_KB:-64}

# 1 MB of text that compresses like text (words from a fixed seed).
python3 - "$W/in.txt" 1048576 <<'PY'
import random, sys
random.seed(22)
words = [''.join(random.choice('etaoinshrdlucmfwyp') for _ in range(random.randint(2, 9))) for _ in range(4000)]
out, n = [], 0
while n < int(sys.argv[2]):
    w = random.choice(words); out.append(w); n += len(w) + 1
open(sys.argv[1], 'w').write(' '.join(out)[:int(sys.argv[2])])
PY
head -c $((VALGRIND_KB * 1024)) "$W/in.txt" > "$W/small.txt"
cat > "$W/work.py" <<'PY'
import json, re
d = {str(i): [i * j for j in range(20)] for i in range(3000)}
s = json.dumps(d)
print(len(re.findall(r'\d+7\b', s)), sum(len(v) for v in json.loads(s).values()))
PY

now() { date +%s.%N; }

# record NAME SOURCE EXTRA... -- CMD...: prints instructions, seconds, rate.
record() {
  local name=$1 source=$2; shift 2
  local t0 t1 line n
  t0=$(now)
  line=$("$PTPERF" record --source "$source" "$@" 2>&1 >/dev/null | grep -o 'simulated [0-9]* instructions' || true)
  t1=$(now)
  n=${line//[!0-9]/}
  printf '%-8s %-9s %12s %8.2f s %9.2f M/s\n' "$name" "$source" "${n:-?}" \
    "$(echo "$t1 - $t0" | bc -l)" "$(echo "${n:-0} / ($t1 - $t0) / 1000000" | bc -l)"
  echo "${n:-0}" > "$W/n-$name-$source"
}

native() {
  local name=$1 n; shift
  n=$(cat "$W/n-$name-qemu")
  local t0 t1
  t0=$(now); "$@" >/dev/null; t1=$(now)
  printf '%-8s %-9s %12s %8.2f s %9.2f M/s  (instructions as QEMU counted them)\n' "$name" native "$n" \
    "$(echo "$t1 - $t0" | bc -l)" "$(echo "$n / ($t1 - $t0) / 1000000" | bc -l)"
}

printf '%-8s %-9s %12s %10s %13s\n' workload source instructions time rate
# The system's python3 (a python3 earlier on PATH may be a shell-script shim).
PY=${PY:-/usr/bin/python3}
for w in ${WORKLOADS:-gzip python}; do
  if [ $w = gzip ]; then cmd=(gzip -c "$W/in.txt"); small=(gzip -c "$W/small.txt")
  else cmd=("$PY" "$W/work.py"); small=("$PY" -c pass); fi
  record $w qemu -o "$W/$w-qemu.data" -- "${cmd[@]}"
  native $w "${cmd[@]}"
  if [ "${FULL:-0}" = 1 ]; then
    record $w valgrind -o "$W/$w-vg.data" -- "${cmd[@]}"
    record $w ptrace -o "$W/$w-pt.data" -- "${cmd[@]}"
  else
    record $w valgrind -o "$W/$w-vg.data" -- "${small[@]}"
    record $w ptrace --limit "$PTRACE_LIMIT" -o "$W/$w-pt.data" -- "${cmd[@]}"
  fi
done
