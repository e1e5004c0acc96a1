#!/usr/bin/env bash
# Compares two atoll binaries on deterministic simulator runs: 3 workloads x 5 protocols x
# {one-sided, rpc}, then TPC-C, the shared-data protocols and the family knobs; faults on.
# Prints IDENTICAL or the differing report fields per run (`env`, the checks named in
# IGNORE_CHECKS, the config fields named in IGNORE_CONFIG and the stages named in
# IGNORE_STAGES are left out). Usage: OLD NEW.
set -euo pipefail
old=$1; new=$2
ignore=${IGNORE_CHECKS:-}
ignore_config=${IGNORE_CONFIG:-}
ignore_stages=${IGNORE_STAGES:-}
out=$(mktemp -d)
common="--fabric sim --duration 0.003 --warmup 0.0005 --seed ${SEED:-5} --faults some --quiet"
runs=()
for w in smallbank ycsb cycle; do for p in nowait occ mvcc sundial waitdie; do for plan in one-sided rpc; do
  runs+=("--workload $w --protocol $p --plan $plan --nodes 3 --threads 2 --coroutines 4")
done; done; done
shared="--architecture shared-data --memory-nodes 2 --compute-nodes 2 --threads 2 --coroutines 4"
for p in nowait occ mvcc sundial waitdie; do
  runs+=("--workload tpcc --protocol $p --nodes 2 --threads 2 --coroutines 2")
done
for p in rsi namdb occ; do for w in skew checkout; do
  runs+=("--workload $w --protocol $p $shared")
done; done
runs+=("--workload ycsb --protocol waitdie --waitdie-counter --nodes 3 --threads 2 --coroutines 4")
runs+=("--workload ycsb --protocol mvcc --mvcc-slots 2 --nodes 3 --threads 2 --coroutines 4")
runs+=("--workload checkout --protocol rsi --rsi-versions 3 $shared")
runs+=("--workload checkout --protocol namdb --rsi-versions 3 --overflow-versions 2 --overflow-keep-us 100 $shared")
runs+=("--workload skew --protocol namdb --vector-slots node --vector-fetcher $shared")
runs+=("--workload checkout --protocol rsi --ts-node own $shared")
runs+=("--workload skew --protocol namdb --ts-node own $shared")
for args in "${runs[@]}"; do
  "$old" bench $common $args --json "$out/old.json" >/dev/null 2>&1 || true
  "$new" bench $common $args --json "$out/new.json" >/dev/null 2>&1 || true
  python3 - "$out" "$args" "$ignore" "$ignore_config" "$ignore_stages" <<'PY'
import json, sys
out, what = sys.argv[1], sys.argv[2]
ignore, ignore_config, ignore_stages = (set(filter(None, a.split(","))) for a in sys.argv[3:6])
a, b = (json.load(open(f"{out}/{n}.json")) for n in ("old", "new"))
for r in (a, b):
    r.pop("env", None)
    r["checks"] = [c for c in r["checks"] if c["name"] not in ignore]
    for k in ignore_config:
        r["config"].pop(k, None)
    for k in ignore_stages:
        r["stage_us_mean"].pop(k, None)
diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
if "config" in diff:
    diff += [f"config.{k}" for k in sorted(set(a["config"]) | set(b["config"])) if a["config"].get(k) != b["config"].get(k)]
print(f"{what:<100} {'IDENTICAL' if not diff else 'DIFF ' + ','.join(diff)}  committed {a['summary']['committed']}")
PY
done
rm -rf "$out"
