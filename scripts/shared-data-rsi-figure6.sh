#!/bin/bash
# RSI's Figure 6 shape in the simulator: fdr-ib, 4 compute + 3 memory + 1 timestamp node,
# TPC-W checkout (1 M products of 1 KiB), closed loop, clients = co-routines over the
# compute nodes (up to 4 simulated cores each). PLAN=rpc gives the paper's baselines: every
# stage a request to a CPU (NET=fdr-ib: the shared-memory design over two-sided verbs;
# NET=ipoib or 10gbe-tcp: traditional SI over TCP).
B=${B:-target/release/atoll}
PLAN=${PLAN:-one-sided}
# COMPUTE=1: every client on one compute node, as the paper's traditional SI ran every
# transaction through one transaction-manager machine.
COMPUTE=${COMPUTE:-4}
# THREAD_PER_CLIENT=1: each client its own simulated core (the paper's client threads), and
# the memory nodes as many; otherwise at most 4 cores per node, the rest co-routines.
THREAD_PER_CLIENT=${THREAD_PER_CLIENT:-0}
J=${OUT:-/tmp}/f6.json
NET=${NET:-fdr-ib}
for clients in ${CLIENTS:-4 8 16 28 40 52 64 72}; do
  n=$((clients / COMPUTE)); t=$(( n < 4 || THREAD_PER_CLIENT == 1 ? n : 4 )); c=$(( (n + t - 1) / t ))
  $B bench --fabric sim --net $NET --workload checkout --protocol rsi --plan $PLAN --log-replicas 0 \
    --architecture shared-data --memory-nodes 3 --compute-nodes $COMPUTE --ts-node own \
    --threads $t --coroutines $c --duration ${DUR:-0.005} --warmup 0.001 --seed 1 --quiet --json $J >/dev/null 2>&1 || { echo "$clients: failed"; continue; }
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); s=r["summary"]; v=r["verbs"]; print("%3s clients (%s threads x %s co-routines per compute node): %9.0f tx/s, aborts %.2f%%, p50 %.1f us, %.2f round trips/txn, memory-node RPCs/txn %.1f, %s" % (sys.argv[2], sys.argv[3], sys.argv[4], s["committed_per_s"], s["abort_rate"]*100, s["latency_us"]["p50"], v["round_trips_per_txn"], v["rpcs_served_by_role"]["memory_nodes"]/max(1,s["committed"]), "PASS" if r["passed"] else "FAIL"))' $J $((COMPUTE*t*c)) $t $c
done
