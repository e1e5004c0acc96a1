#!/usr/bin/env bash
# Issue-11 figures: Deneva's shapes (2 server processes x 1 worker, localhost tcp) for every
# protocol x {one-sided, rpc}: YCSB (2 Mi rows of 1000 B in all, zipf 0.6, 10 requests per
# transaction over both nodes, write_fraction 0.25 standing in for Deneva's half of the
# tuples of half the transactions; compute_us=0, as Deneva's YCSB spends no time computing
# between its accesses, where our default is RCC's 5 us) and TPC-C (4 warehouses,
# NewOrder/Payment 50/50).
# Deneva on this kind of machine: YCSB 10.6-14.6 K tx/s, TPC-C 4.9-22.6 K tx/s.
# Run on an idle machine (check `uptime`).
# Usage: [BIN=target/release/atoll] [DURATION=5] [WARMUP=1] [TRANSPORT=tcp] [COROUTINES=16] scripts/deneva-shapes.sh
set -euo pipefail
bin=${BIN:-target/release/atoll}
dur=${DURATION:-5}
warm=${WARMUP:-1}
transport=${TRANSPORT:-tcp}
co=${COROUTINES:-16}
out=${OUT:-target/deneva-shapes}
mkdir -p "$out"
shape="--threads 1 --coroutines $co --duration $dur --warmup $warm --seed 1 --quiet"
ycsb="--workload ycsb -p records=1048576 -p record_bytes=1000 -p distribution=zipfian -p zipf_theta=0.6 -p ops_per_txn=10 -p write_fraction=0.25 -p compute_us=0"
tpcc="--workload tpcc -p warehouses=4 -p mix=neworder-payment"
for w in ycsb tpcc; do
  flags=$ycsb
  [ "$w" = tpcc ] && flags=$tpcc
  for p in nowait waitdie occ mvcc sundial; do
    for plan in one-sided rpc; do
      # shellcheck disable=SC2086
      "$bin" cluster --nodes 2 --transport "$transport" bench $flags --protocol $p --plan $plan $shape \
        --json "$out/$w-$p-$plan-$transport.json" >/dev/null
    done
  done
done
python3 - "$out" "$transport" <<'PY'
import json, sys
out, t = sys.argv[1], sys.argv[2]
deneva_top = {"ycsb": 14600, "tpcc": 22600}
print(f"{'workload':<8} {'protocol':<8} {'plan':<10} {'tx/s':>9} {'x Deneva top':>13}  checks")
for w in ("ycsb", "tpcc"):
    for p in ("nowait", "waitdie", "occ", "mvcc", "sundial"):
        for plan in ("one-sided", "rpc"):
            j = json.load(open(f"{out}/{w}-{p}-{plan}-{t}.json"))
            fails = sum(1 for c in j["checks"] if not c["passed"])
            r = j["summary"]["committed_per_s"]
            print(f"{w:<8} {p:<8} {plan:<10} {r:>9.0f} {r / deneva_top[w]:>13.2f}  {'PASS' if fails == 0 else f'{fails} FAILED'}")
PY
