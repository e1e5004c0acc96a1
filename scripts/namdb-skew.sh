#!/bin/bash
# NAM-DB under contention in the simulator (seed-mechanisms.md claim 27; the slides' Fig 8):
# fdr-ib, 7 compute + 1 memory node, YCSB of 4 operations (half of them updates) over 1 M
# records, zipfian keys from theta 0 to 0.99, 112 clients; throughput and abort rate.
B=${B:-target/release/atoll}
J=${OUT:-/tmp}/skew.json
PROTOCOL=${PROTOCOL:-namdb}
for theta in ${THETAS:-0 0.5 0.7 0.8 0.9 0.95 0.99}; do
  if [ "$theta" = 0 ]; then D="-p distribution=uniform"; else D="-p distribution=zipfian -p zipf_theta=$theta"; fi
  $B bench --fabric sim --net fdr-ib --workload ycsb -p records=1000000 -p ops_per_txn=4 -p write_fraction=0.5 -p record_bytes=64 $D \
    --protocol $PROTOCOL ${EXTRA} --log-replicas 0 --architecture shared-data --memory-nodes 1 --compute-nodes 7 \
    --threads 4 --coroutines 4 --duration ${DUR:-0.004} --warmup 0.001 --seed 1 --quiet --json $J >/dev/null 2>&1 || { echo "theta $theta: failed"; continue; }
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); s=r["summary"]; print("%-6s theta %-5s %9.0f tx/s, aborts %5.1f%%, p50 %6.1f us, %s" % (sys.argv[3], sys.argv[2], s["committed_per_s"], s["abort_rate"]*100, s["latency_us"]["p50"], "PASS" if r["passed"] else "FAIL"))' $J $theta $PROTOCOL
done
