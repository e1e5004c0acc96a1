#!/bin/bash
# TPC-C under every protocol on the partitioned and the shared-data architecture, side by side,
# in the simulator (issue 12, "partitioned vs shared-data on the same workload and cores"):
# fdr-ib, WAREHOUSES (4) per node holding records, 4 cores x 4 co-routines per node running
# transactions, one-sided plans, no log backups. Partitioned: N nodes. Shared-data: N memory +
# N compute nodes, apart and co-located (--colocate).
B=${B:-target/release/atoll}
J=${OUT:-/tmp}/tpcc-architectures.json
N=${NODES:-2}
W=${WAREHOUSES:-4}
for p in ${PROTOCOLS:-nowait waitdie occ mvcc sundial rsi namdb}; do
  for a in partitioned shared-data co-located; do
    case $a in
      partitioned) A="--nodes $N";;
      shared-data) A="--architecture shared-data --memory-nodes $N --compute-nodes $N";;
      co-located) A="--architecture shared-data --memory-nodes $N --compute-nodes $N --colocate";;
    esac
    $B bench --fabric sim --net fdr-ib --workload tpcc -p warehouses=$W --protocol $p $A --log-replicas 0 \
      --threads ${THREADS:-4} --coroutines ${COROUTINES:-4} --duration ${DUR:-0.004} --warmup 0.001 --seed 1 --quiet --json $J >/dev/null 2>&1 || { echo "$p $a: failed"; continue; }
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); s=r["summary"]; print("%-8s %-12s %9.0f tx/s, aborts %5.1f%%, p50 %6.1f us, %s" % (sys.argv[2], sys.argv[3], s["committed_per_s"], s["abort_rate"]*100, s["latency_us"]["p50"], "PASS" if r["passed"] else "FAIL"))' $J $p $a
  done
done
