#!/usr/bin/env bash
# Issue-3 figures: SmallBank and YCSB (RCC defaults) on simulated 4, 16 and 64 nodes with
# edr-ib, NOWAIT and OCC x {one-sided, rpc}: committed tx/s, abort rate, p99, and how fast the
# simulation ran. One run per cell: a simulated run is deterministic for its seed.
# CPU_PROFILE=xeon reproduces the figures of the notes before issue 9's calibration (default:
# calibrated).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-2}; coroutines=${COROUTINES:-8}; dur=${DURATION:-0.01}; warm=${WARMUP:-0.002}
out=${OUT:-target/figures-sim}
mkdir -p "$out"
cargo build --release -q
printf '%-10s %5s %-7s %-10s %14s %8s %9s %14s\n' workload nodes proto plan "committed/s" "abort%" "p99us" "sim tx/wall-s"
for w in smallbank ycsb; do
  for n in ${NODES:-4 16 64}; do
    for p in nowait occ; do
      for plan in one-sided rpc; do
        f="$out/$w-$n-$p-$plan"
        ./target/release/atoll bench --fabric sim --net edr-ib --cpu-profile "${CPU_PROFILE:-calibrated}" --workload $w --protocol $p --plan $plan \
          --nodes $n --threads $threads --coroutines $coroutines --duration $dur --warmup $warm --seed 1 \
          --quiet --json "$f.json" > "$f.txt"
        speed=$(grep -o '[0-9]* committed tx per wall second' "$f.txt" | cut -d' ' -f1)
        python3 - "$f.json" "$w" "$n" "$p" "$plan" "$speed" <<'PY'
import json, sys
f, w, n, p, plan, speed = sys.argv[1:]
r = json.load(open(f))
s = r["summary"]
print(f"{w:<10} {n:>5} {p:<7} {plan:<10} {s['committed_per_s']:>14.0f} {100*s['abort_rate']:>8.2f} {s['latency_us']['p99']:>9.1f} {int(speed):>14}")
PY
      done
    done
  done
done
