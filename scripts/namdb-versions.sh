#!/bin/bash
# What keeping older versions costs a reader, in the simulator: fdr-ib, 7 compute + 1 memory
# node, YCSB transactions of 4 operations (half updates) over 100 K records of 1000 bytes,
# 112 clients (4 simulated cores x 4 co-routines per compute node), V versions per record.
# RSI READs whole blocks (every version moves on every read); NAM-DB READs the head and the
# old versions' headers and fetches an old payload by a second READ only when its snapshot
# needs one. PROTOCOLS, VERSIONS and EXTRA (e.g. "--vector-fetcher") pick the variants.
B=${B:-target/release/atoll}
J=${OUT:-/tmp}/versions.json
for p in ${PROTOCOLS:-rsi namdb}; do
  for v in ${VERSIONS:-1 2 4 8}; do
    $B bench --fabric sim --net fdr-ib --workload ycsb -p records=100000 -p record_bytes=1000 \
      -p ops_per_txn=4 -p write_fraction=0.5 --protocol $p --rsi-versions $v $EXTRA --log-replicas 0 \
      --architecture shared-data --memory-nodes 1 --compute-nodes 7 --threads 4 --coroutines 4 \
      --duration ${DUR:-0.004} --warmup 0.001 --seed 1 --quiet --json $J >/dev/null 2>&1 || { echo "$p $v: failed"; continue; }
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); s=r["summary"]; v=r["verbs"]; rd=v["by_kind"]["read"]; print("%-6s %s versions: %9.0f tx/s, aborts %5.2f%%, p50 %6.1f us, %5.2f READs and %6.0f read bytes per commit, %s" % (sys.argv[2], sys.argv[3], s["committed_per_s"], s["abort_rate"]*100, s["latency_us"]["p50"], rd["remote_ops"]/max(s["committed"],1), rd["remote_bytes"]/max(s["committed"],1), "PASS" if r["passed"] else "FAIL"))' $J $p $v
  done
done
