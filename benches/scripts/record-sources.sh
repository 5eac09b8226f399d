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
# of what they recorded. Rates are wall-clock and per CPU-second (user +
# system time of ptperf and the QEMU or valgrind it runs, /usr/bin/time): on
# a loaded machine the second is the steadier figure.
#
# Then memory: a recording of about MEM_INSNS (1G) instructions with the
# qemu source (gzip of a larger input), beside the 1 MB one: the peak RSS
# (VmHWM, sampled) of ptperf and of the QEMU it runs stay where they were.
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

# record NAME SOURCE EXTRA... -- CMD...: prints instructions, seconds, rate,
# CPU seconds, rate per CPU-second.
record() {
  local name=$1 source=$2; shift 2
  local t0 t1 line n cpu
  t0=$(now)
  line=$(/usr/bin/time -f 'cpu %U %S' -o "$W/time" "$PTPERF" record --source "$source" "$@" 2>&1 >/dev/null | grep -o 'simulated [0-9]* instructions' || true)
  t1=$(now)
  n=${line//[!0-9]/}
  cpu=$(awk '/^cpu/ { print $2 + $3 }' "$W/time")
  printf '%-8s %-9s %12s %8.2f s %9.2f M/s %8.2f s %9.2f M/s\n' "$name" "$source" "${n:-?}" \
    "$(echo "$t1 - $t0" | bc -l)" "$(echo "${n:-0} / ($t1 - $t0) / 1000000" | bc -l)" \
    "$cpu" "$(echo "${n:-0} / ($cpu + 0.001) / 1000000" | bc -l)"
  echo "${n:-0}" > "$W/n-$name-$source"
}

# hwm PID: the peak RSS (kB) of a process, from /proc, 0 once it is gone.
hwm() { awk '/^VmHWM/ { print $2; found = 1 } END { if (!found) print 0 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# peak NAME -- CMD...: records CMD with the qemu source while sampling the
# peak RSS of ptperf and of its QEMU; prints instructions and both peaks.
peak() {
  local name=$1; shift
  local pid me=0 q=0 v c n
  "$PTPERF" record --source qemu -o "$W/$name-mem.data" "$@" >/dev/null 2>"$W/$name-mem.err" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    v=$(hwm "$pid"); [ "$v" -gt "$me" ] && me=$v
    for c in $(pgrep -P "$pid" || true); do
      v=$(hwm "$c"); [ "$v" -gt "$q" ] && q=$v
    done
    sleep 0.1
  done
  wait "$pid" || true
  n=$(grep -o 'simulated [0-9]* instructions' "$W/$name-mem.err" | tr -dc 0-9)
  printf '%-10s %14s %12.1f MB %12.1f MB\n' "$name" "${n:-?}" "$(echo "$me / 1024" | bc -l)" "$(echo "$q / 1024" | bc -l)"
  rm -f "$W/$name-mem.data" "$W/$name-mem.data.log"
}

native() {
  local name=$1 n; shift
  n=$(cat "$W/n-$name-qemu")
  local t0 t1
  t0=$(now); "$@" >/dev/null; t1=$(now)
  printf '%-8s %-9s %12s %8.2f s %9.2f M/s  (instructions as QEMU counted them)\n' "$name" native "$n" \
    "$(echo "$t1 - $t0" | bc -l)" "$(echo "$n / ($t1 - $t0) / 1000000" | bc -l)"
}

printf '%-8s %-9s %12s %10s %13s %10s %13s\n' workload source instructions time rate cpu 'rate/cpu'
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

# Memory flat in the program's length: 1 MB of gzip input (about 165M
# instructions) and MEM_MB of it (6 MB: about 1G).
MEM_MB=${MEM_MB:-6}
for _ in $(seq "$MEM_MB"); do cat "$W/in.txt"; done > "$W/big.txt"
echo
printf '%-10s %14s %15s %15s\n' recording instructions 'ptperf peak' 'qemu peak'
peak gzip-1MB -- gzip -c "$W/in.txt"
peak "gzip-${MEM_MB}MB" -- gzip -c "$W/big.txt"
