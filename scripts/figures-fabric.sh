#!/usr/bin/env bash
# Issue-11 figures: `atoll fabric-bench` (READ, WRITE, CAS, FETCH_ADD, RPC, a doorbell of 8
# through the fabric's Endpoint, 2 processes over UCX) beside `ucx_perftest` (Debian's
# ucx-utils) for the same operations, 2 processes on localhost, over shm and tcp: latency
# (one op outstanding, medians) and rate (16 outstanding), and ours / theirs.
# Run on an idle machine (check `uptime`): each side busy-polls a core.
# Usage: [BIN=target/release/atoll] [DURATION_MS=1000] [N_SHM=1000000] [N_TCP=100000]
#        [OUT=target/figures-fabric] scripts/figures-fabric.sh
set -euo pipefail
bin=${BIN:-target/release/atoll}
dur=${DURATION_MS:-1000}
n_shm=${N_SHM:-1000000}
n_tcp=${N_TCP:-100000}
out=${OUT:-target/figures-fabric}
# Outstanding ops of the rate figures: atoll fabric-bench's window (16 co-routines).
window=16
mkdir -p "$out"
command -v ucx_perftest >/dev/null || { echo "error: ucx_perftest missing: apt-get install ucx-utils" >&2; exit 2; }

"$bin" fabric-bench --transport both --duration-ms "$dur" --json "$out/atoll.json" | tee "$out/atoll.txt"

# perftest TLS TEST N OUTSTANDING NAME: a server and a client on localhost with the UCX
# transports atoll's context sets (shm: sm,self; tcp: tcp); keeps the client's Final line.
perftest() {
  local tls=$1 test=$2 n=$3 o=$4 name=$5 port=$((20000 + RANDOM % 20000))
  UCX_TLS=$tls timeout 300 ucx_perftest -p "$port" >"$out/$name.server.txt" 2>&1 &
  local server=$!
  local tries=0
  # The client connects once the server listens: retried, at most 50 times 0.1 s.
  until UCX_TLS=$tls timeout 300 ucx_perftest localhost -p "$port" -t "$test" -s 8 -n "$n" -O "$o" >"$out/$name.txt" 2>&1; do
    tries=$((tries + 1))
    if [ $tries -ge 50 ]; then echo "error: ucx_perftest $test over $tls failed:" >&2; cat "$out/$name.txt" >&2; kill $server 2>/dev/null; exit 1; fi
    sleep 0.1
  done
  wait $server || true
  grep '^Final:' "$out/$name.txt" | tail -1 >"$out/$name.final"
  echo "UCX_TLS=$tls ucx_perftest localhost -p PORT -t $test -s 8 -n $n -O $o: $(cat "$out/$name.final")"
}

for t in shm tcp; do
  if [ $t = shm ]; then tls=sm,self; n=$n_shm; else tls=tcp; n=$n_tcp; fi
  for test in ucp_get ucp_cswap ucp_fadd; do
    perftest $tls $test "$n" 1 "$t-$test-lat"
    perftest $tls $test "$n" $window "$t-$test-rate"
  done
  perftest $tls ucp_put_lat "$n" 1 "$t-ucp_put_lat-lat"
  perftest $tls ucp_put_bw "$n" $window "$t-ucp_put_bw-rate"
  perftest $tls ucp_am_lat "$n" 1 "$t-ucp_am_lat-lat"
  perftest $tls ucp_am_bw "$n" $window "$t-ucp_am_bw-rate"
done

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
ours = {t["transport"]: {o["op"]: o for o in t["ops"]} for t in json.load(open(f"{out}/atoll.json"))["transports"]}
def final(name):
    f = open(f"{out}/{name}.final").read().split()
    # Final: iterations, latency p50, avg, overall (us), bandwidth avg, overall (MB/s), rate avg, overall (msg/s)
    return float(f[2]), float(f[8])
# op: (latency test, one-way ping-pong?, rate test)
tests = {
    "read": ("ucp_get", False, "ucp_get"),
    "write": ("ucp_put_lat", True, "ucp_put_bw"),
    "cas": ("ucp_cswap", False, "ucp_cswap"),
    "fetch_add": ("ucp_fadd", False, "ucp_fadd"),
    "rpc": ("ucp_am_lat", True, "ucp_am_bw"),
}
print(f"{'op':<10} {'tr':<4} {'AM?':<4} {'ours p50':>9} {'theirs':>9} {'x':>7} {'ours ops/s':>11} {'theirs':>11} {'x':>6} {'ours/AM rtt':>11}  theirs as")
for t in ("shm", "tcp"):
    am_rtt = final(f"{t}-ucp_am_lat-lat")[0] * 2
    for op, row in ours[t].items():
        lat, rate = row["latency_us_p50"], row["rate_ops_per_s"]
        am = "yes" if row["emulated_by_am"] else "no"
        if op not in tests:
            print(f"{op:<10} {t:<4} {am:<4} {lat:>9.2f} {'-':>9} {'-':>7} {rate:>11.0f} {'-':>11} {'-':>6} {lat / am_rtt:>11.2f}  no equivalent")
            continue
        lt, pingpong, rt = tests[op]
        tl = final(f"{t}-{lt}-lat")[0] * (2 if pingpong else 1)
        tr = final(f"{t}-{rt}-rate")[1]
        how = f"{lt}{' x2 (one-way)' if pingpong else ''}, {rt} -O 16"
        print(f"{op:<10} {t:<4} {am:<4} {lat:>9.2f} {tl:>9.3f} {lat / tl:>7.1f} {rate:>11.0f} {tr:>11.0f} {rate / tr:>6.3f} {lat / am_rtt:>11.2f}  {how}")
PY
