#!/usr/bin/env bash
# Issue-4 figures: YCSB contention sweep in the simulator (edr-ib, 4 nodes), hot-access
# probability 10..90%, five protocols x {one-sided, rpc}. One run per cell (deterministic).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-2}; coroutines=${COROUTINES:-8}; dur=${DURATION:-0.01}; warm=${WARMUP:-0.002}
out=${OUT:-target/figures-contention}
mkdir -p "$out"
cargo build --release -q
printf '%-8s %-10s' proto plan; for h in 10 30 50 70 90; do printf ' %16s' "hot=$h% tx/s(ab%)"; done; echo
for p in nowait waitdie occ mvcc sundial; do
  for plan in one-sided rpc; do
    printf '%-8s %-10s' $p $plan
    for h in 0.1 0.3 0.5 0.7 0.9; do
      f="$out/$p-$plan-$h.json"
      ./target/release/atoll bench --fabric sim --net edr-ib --workload ycsb --protocol $p --plan $plan \
        --nodes 4 --threads $threads --coroutines $coroutines --duration $dur --warmup $warm --seed 1 \
        -p hot_prob=$h --quiet --json "$f" > /dev/null
      python3 -c "import json,sys; s=json.load(open('$f'))['summary']; print(' %9.0f(%5.1f)' % (s['committed_per_s'], 100*s['abort_rate']), end='')"
    done
    echo
  done
done
