#!/usr/bin/env bash
# Compares two atoll binaries on deterministic simulator runs: 3 workloads x 5 protocols x
# {one-sided, rpc}, faults on. Prints IDENTICAL or the differing report fields per run
# (`env` and checks named in IGNORE_CHECKS are left out). Usage: OLD NEW.
set -euo pipefail
old=$1; new=$2
ignore=${IGNORE_CHECKS:-}
out=$(mktemp -d)
for w in smallbank ycsb cycle; do for p in nowait occ mvcc sundial waitdie; do for plan in one-sided rpc; do
  args="bench --fabric sim --workload $w --protocol $p --plan $plan --nodes 3 --threads 2 --coroutines 4 --duration 0.003 --warmup 0.0005 --seed ${SEED:-5} --faults some --quiet"
  "$old" $args --json "$out/old.json" >/dev/null 2>&1 || true
  "$new" $args --json "$out/new.json" >/dev/null 2>&1 || true
  python3 - "$out" "$w $p $plan" "$ignore" <<'PY'
import json, sys
out, what, ignore = sys.argv[1], sys.argv[2], set(filter(None, sys.argv[3].split(",")))
a, b = (json.load(open(f"{out}/{n}.json")) for n in ("old", "new"))
for r in (a, b):
    r.pop("env", None)
    r["checks"] = [c for c in r["checks"] if c["name"] not in ignore]
diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
print(f"{what:<28} {'IDENTICAL' if not diff else 'DIFF ' + ','.join(diff)}  committed {a['summary']['committed']}")
PY
done; done; done
rm -rf "$out"
