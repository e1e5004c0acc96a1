#!/usr/bin/env bash
# Issue-11 figures: every protocol x {one-sided, rpc} x {SmallBank, YCSB} on 3 nodes, run
# in-process (`atoll bench`) and as 3 processes over UCX shm and tcp (`atoll cluster`),
# committed tx/s and the ratio of each cluster run to the in-process one. Run on an idle
# machine (check `uptime`); 3 busy-polling processes share this machine's cores.
# Usage: [BIN=target/release/atoll] [DURATION=2] [WARMUP=0.5] [THREADS=1] scripts/figures-cluster.sh
set -euo pipefail
bin=${BIN:-target/release/atoll}
dur=${DURATION:-2}
warm=${WARMUP:-0.5}
threads=${THREADS:-1}
out=${OUT:-target/figures-cluster}
mkdir -p "$out"
shape="--threads $threads --coroutines 8 --duration $dur --warmup $warm --seed 1 --quiet"
for w in smallbank ycsb; do
  for p in nowait waitdie occ mvcc sundial; do
    for plan in one-sided rpc; do
      name=$w-$p-$plan
      # shellcheck disable=SC2086
      "$bin" bench --nodes 3 --workload $w --protocol $p --plan $plan $shape --json "$out/$name-inproc.json" >/dev/null
      for t in shm tcp; do
        # shellcheck disable=SC2086
        "$bin" cluster --nodes 3 --transport $t bench --workload $w --protocol $p --plan $plan $shape --json "$out/$name-$t.json" >/dev/null
      done
    done
  done
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def tx(name):
    j = json.load(open(f"{out}/{name}.json"))
    fails = [c for c in j["checks"] if not c["passed"]]
    return j["summary"]["committed_per_s"], len(fails)
print(f"{'workload':<10} {'protocol':<8} {'plan':<10} {'in-process':>11} {'shm':>10} {'x':>6} {'tcp':>10} {'x':>6}  failed checks")
for w in ("smallbank", "ycsb"):
    for p in ("nowait", "waitdie", "occ", "mvcc", "sundial"):
        for plan in ("one-sided", "rpc"):
            n = f"{w}-{p}-{plan}"
            (i, fi), (s, fs), (t, ft) = tx(n + "-inproc"), tx(n + "-shm"), tx(n + "-tcp")
            print(f"{w:<10} {p:<8} {plan:<10} {i:>11.0f} {s:>10.0f} {s / i:>6.2f} {t:>10.0f} {t / i:>6.2f}  {fi}/{fs}/{ft}")
PY
