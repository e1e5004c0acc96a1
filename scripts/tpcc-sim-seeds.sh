#!/usr/bin/env bash
# Issue-10 must-show: TPC-C in the simulator with the test suite's faults, every mix x every
# protocol x SEEDS seeds (plans alternating one-sided / rpc by seed), scaled population
# (30 customers per district, 100 items, 50 new orders per district); each run's conditions
# (exit 0) and history (atoll check-history, exit 0) must be clean. Prints one count line per
# mix and protocol, and a FAIL line (with the seed) per failed run, whose output is kept.
#   SEEDS=200 BASE=5000 MIXES="standard neworder" PROTOCOLS="occ mvcc" scripts/tpcc-sim-seeds.sh
#   BIN=path/to/atoll uses that binary (default: build this tree)
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${SEEDS:-200}; base=${BASE:-5000}
mixes=${MIXES:-standard neworder-payment neworder read-intensive shardable}
protocols=${PROTOCOLS:-nowait waitdie occ mvcc sundial}
faults=spikes=3,spike_us=50,spike_len_us=300,pauses=2,pause_us=200,tear_words=2,tear_ns=1000,stall_permille=50,stall_us=50
out=${OUT:-target/tpcc-sim-seeds}
target=${CARGO_TARGET_DIR:-target}
mkdir -p "$out"
if [ -z "${BIN:-}" ]; then
  cargo build --release -q
  BIN=$target/release/atoll
fi
bin=$BIN
for mix in $mixes; do
  for p in $protocols; do
    ok=0; bad=0
    for s in $(seq "$base" $((base + seeds - 1))); do
      plan=one-sided; [ $((s % 2)) = 1 ] && plan=rpc
      h="$out/h-$mix-$p.jsonl"
      if "$bin" bench --fabric sim --net edr-ib --faults "$faults" --workload tpcc --protocol "$p" --plan $plan \
           --nodes 3 --threads 2 --coroutines 4 --duration 0.002 --warmup 0.0005 --seed "$s" \
           -p customers_per_district=30 -p items=100 -p new_orders_max=50 -p mix="$mix" \
           --quiet --history "$h" > "$out/last.txt" 2>&1 && "$bin" check-history "$h" > "$out/last-check.txt" 2>&1; then
        ok=$((ok + 1))
      else
        bad=$((bad + 1)); echo "FAIL $mix $p $plan seed $s"; cp "$out/last.txt" "$out/fail-$mix-$p-$s.txt"
      fi
    done
    echo "$mix $p: $ok clean, $bad failed of $seeds"
  done
done
