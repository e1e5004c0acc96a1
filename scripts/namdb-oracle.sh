#!/bin/bash
# NAM-DB's timestamp-oracle figure in the simulator (seed-mechanisms.md claim 26): fdr-ib,
# 7 compute + 1 memory node (the timestamp role on the memory node), closed loop,
# clients = co-routines over the compute nodes (up to 4 simulated cores each). Variants:
# the global counter (RSI's timestamp service: a FETCH_ADD per commit, a READ per snapshot),
# and NAM-DB's vector per coordinator, compressed to one slot per node, with the detached
# fetcher, and both. WORKLOAD=oracle (the default): YCSB transactions of one update of a
# 64-byte record among 1 M, so the timestamps are most of the work, as in the paper's oracle
# figure; WORKLOAD=smallbank for a whole benchmark. MEMORY=M spreads the records over M
# memory nodes and TS=own gives the timestamps a node of their own, so the data path no
# longer bounds the vector before the oracle does (the paper measured the oracle alone);
# VARIANTS picks variants; T_MAX caps the simulated cores per compute node (4).
B=${B:-target/release/atoll}
J=${OUT:-/tmp}/oracle.json
COMPUTE=7
case ${WORKLOAD:-oracle} in
  oracle) W="--workload ycsb -p records=1000000 -p ops_per_txn=1 -p write_fraction=1 -p record_bytes=64";;
  *) W="--workload $WORKLOAD";;
esac
for variant in ${VARIANTS:-counter vector vector+compression vector+fetcher vector+compression+fetcher}; do
  case $variant in
    counter) X="--protocol rsi";;
    vector) X="--protocol namdb";;
    vector+compression) X="--protocol namdb --vector-slots node";;
    vector+fetcher) X="--protocol namdb --vector-fetcher";;
    vector+compression+fetcher) X="--protocol namdb --vector-slots node --vector-fetcher";;
  esac
  for clients in ${CLIENTS:-7 28 56 112 224 448 896}; do
    n=$((clients / COMPUTE)); t=$(( n < ${T_MAX:-4} ? n : ${T_MAX:-4} )); c=$(( (n + t - 1) / t ))
    $B bench --fabric sim --net fdr-ib $W $X --log-replicas 0 \
      --architecture shared-data --memory-nodes ${MEMORY:-1} ${TS:+--ts-node $TS} --compute-nodes $COMPUTE \
      --threads $t --coroutines $c --duration ${DUR:-0.004} --warmup 0.001 --seed 1 --quiet --json $J >/dev/null 2>&1 || { echo "$variant $clients: failed"; continue; }
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); s=r["summary"]; v=r["verbs"]; print("%-27s %4s clients: %9.0f tx/s, aborts %5.2f%%, p50 %6.1f us, %.2f round trips/txn, %s" % (sys.argv[2], sys.argv[3], s["committed_per_s"], s["abort_rate"]*100, s["latency_us"]["p50"], v["round_trips_per_txn"], "PASS" if r["passed"] else "FAIL"))' $J $variant $((COMPUTE*t*c))
  done
done
