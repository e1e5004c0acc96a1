#!/usr/bin/env bash
# Issue-9 calibration figures: simulated per-thread throughput at RCC's shape (edr-ib, 4 nodes
# x 10 threads x 10 co-routines, 2 log backups as RCC's 3-way replication), SmallBank and
# YCSB (RCC defaults), five protocols x {one-sided, rpc}, under the `xeon` CPU profile and
# the calibrated one. One run per cell: a simulated run is deterministic for its seed.
# BIN=path/to/atoll uses that binary (default: build this tree); PROFILES, PROTOCOLS, PLANS,
# WORKLOADS, DURATION, WARMUP narrow or lengthen the sweep.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BIN:-}" ]; then
  cargo build --release -q
  BIN=${CARGO_TARGET_DIR:-target}/release/atoll
fi
nodes=${NODES:-4}; threads=${THREADS:-10}; coroutines=${COROUTINES:-10}
dur=${DURATION:-0.03}; warm=${WARMUP:-0.01}
out=${OUT:-target/figures-calibration}
mkdir -p "$out"
printf '%-10s %-8s %-10s %-11s %14s %12s %8s %9s\n' workload proto plan cpu "committed/s" "per thread" "abort%" "p50us"
for w in ${WORKLOADS:-smallbank ycsb}; do
  for p in ${PROTOCOLS:-occ nowait waitdie mvcc sundial}; do
    for plan in ${PLANS:-one-sided rpc}; do
      for cpu in ${PROFILES:-xeon calibrated}; do
        f="$out/$w-$p-$plan-$cpu"
        "$BIN" bench --fabric sim --net edr-ib --cpu-profile "$cpu" --workload "$w" --protocol "$p" \
          --plan "$plan" --nodes "$nodes" --threads "$threads" --coroutines "$coroutines" \
          --log-replicas 2 --duration "$dur" --warmup "$warm" --seed 1 --quiet --json "$f.json" > "$f.txt"
        python3 - "$f.json" "$w" "$p" "$plan" "$cpu" "$((nodes * threads))" <<'PY'
import json, sys
f, w, p, plan, cpu, threads = sys.argv[1:]
s = json.load(open(f))["summary"]
print(f"{w:<10} {p:<8} {plan:<10} {cpu:<11} {s['committed_per_s']:>14.0f} {s['committed_per_s'] / int(threads):>12.0f} {100 * s['abort_rate']:>8.2f} {s['latency_us']['p50']:>9.1f}")
PY
      done
    done
  done
done
