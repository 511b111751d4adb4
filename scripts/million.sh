#!/usr/bin/env bash
# scripts/million.sh: N connections on this machine, each joined to one
# room, held, measured, sent one broadcast, closed; bounded in time.
#
#   scripts/million.sh [--conns N] [--nodes G] [--out DIR] [--timeout SECS]
#                      [--connect-rate R (all processes, default 2000/s)]
#                      [--refresh-window SECS] [--mem-floor MiB]
#                      [--dialing N (handshakes in flight per load process)]
#                      [--set-sysctl] [--wsgate BIN]
#
# It starts one private Redis (a free port, its own key prefix; never a
# system Redis), G gateway processes and G load processes (`wsgate bench
# connect --join bench --listen --retry`, one per node, each with its own
# users and source addresses 127.<c>.<b>.1-4, so no process needs more than N/G + a few
# descriptors: 1,000,000 over 53 nodes is 18,868 each, under the limit of
# 20,000 files per process). With every connection open it measures:
#
#   - each node's RSS per connection (/proc/PID/status, after - before),
#     the max and the median; the node's heap from /metrics;
#   - Redis memory per connection (INFO memory used_memory, after - before);
#   - the machine's memory per connection, kernel included (/proc/meminfo
#     MemAvailable and Slab, after - before; /proc/net/sockstat);
#   - the cost of the nodes' periodic route refresh (every route TTL / 3,
#     30 s by default): Redis CPU (INFO cpu used_cpu_sys + used_cpu_user)
#     and the nodes' CPU over --refresh-window seconds of idle hold, per
#     refresh period and per connection;
#   - one broadcast to every connection: each load process reports its
#     receive latencies as a histogram; the script merges the histograms
#     into one p50/p99/max (and also shows the largest per-process p99).
#
# While connecting it watches MemAvailable: below --mem-floor (3 GiB) it
# stops the ramps (SIGUSR2 to the load processes) and measures what is
# open, saying so, rather than let the kernel's OOM killer choose.
#
# Then it ends the hold (SIGUSR1), waits for the load processes' reports
# and stops everything it started (also on error, Ctrl-C or --timeout).
# The report: DIR/report.txt and DIR/report.json, with every raw snapshot
# and the processes' logs beside them.
#
# System limits are checked first; what is too low is printed with the
# sysctl that fixes it. --set-sysctl (as root) applies those sysctls, each
# one printed; without it nothing is changed.
#
# Develop at small scale first: scripts/million.sh --conns 40000 --nodes 4
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/cluster-lib.sh"

conns=1000000
nodes=53
out=/tmp/wsgate-million-$(date +%Y%m%d-%H%M%S)
timeout=1800
rate=2000
window=65
floor_mib=3072
dialing=16
set_sysctl=0
bin=
while (($#)); do
	case $1 in
	--conns) conns=$2; shift 2 ;;
	--nodes) nodes=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--timeout) timeout=$2; shift 2 ;;
	--connect-rate) rate=$2; shift 2 ;;
	--refresh-window) window=$2; shift 2 ;;
	--mem-floor) floor_mib=$2; shift 2 ;;
	--dialing) dialing=$2; shift 2 ;;
	--set-sysctl) set_sysctl=1; shift ;;
	--wsgate) bin=$2; shift 2 ;;
	-h | --help) sed -n '2,38p' "$0"; exit 0 ;;
	*) echo "million.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
per=$(((conns + nodes - 1) / nodes))
ips_per=4
mkdir -p "$out"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$out/progress.log"; }

# ---- limits -------------------------------------------------------------
need_fds=$((per + 200))
check() { # name have want how: want <= have, else print (and maybe apply) the fix
	local name=$1 have=$2 want=$3 fix=$4
	if ((have >= want)); then
		printf '  ok   %-34s %s (need %s)\n' "$name" "$have" "$want"
		return
	fi
	printf '  LOW  %-34s %s (need %s): %s\n' "$name" "$have" "$want" "$fix"
	if ((set_sysctl)) && [[ $fix == sysctl* ]] && ((EUID == 0)); then
		echo "       applying: $fix"
		eval "$fix" >/dev/null
	fi
}
read -r plo phi </proc/sys/net/ipv4/ip_local_port_range
read -r _ tcp_pressure tcp_max </proc/sys/net/ipv4/tcp_mem
{
	echo "limits for $conns connections over $nodes nodes ($per per node and per load process):"
	check "ulimit -n (descriptors per process)" "$(ulimit -Hn)" "$need_fds" "raise the hard limit (limits.conf, systemd LimitNOFILE) or use more --nodes"
	check "fs.nr_open" "$(cat /proc/sys/fs/nr_open)" "$need_fds" "sysctl -w fs.nr_open=$need_fds"
	check "fs.file-max" "$(cat /proc/sys/fs/file-max)" "$((2 * conns + 100000))" "sysctl -w fs.file-max=$((2 * conns + 100000))"
	check "ports per source address x $ips_per" "$(((phi - plo + 1) * ips_per))" "$per" "sysctl -w net.ipv4.ip_local_port_range='1024 65000'"
	check "net.core.somaxconn" "$(cat /proc/sys/net/core/somaxconn)" 4096 "sysctl -w net.core.somaxconn=4096"
	check "net.ipv4.tcp_max_syn_backlog" "$(cat /proc/sys/net/ipv4/tcp_max_syn_backlog)" 2048 "sysctl -w net.ipv4.tcp_max_syn_backlog=4096"
	check "vm.max_map_count" "$(cat /proc/sys/vm/max_map_count)" 65530 "sysctl -w vm.max_map_count=262144"
	# One small message queued on every socket at once (the broadcast):
	# about 2 KiB of socket memory each (skb truesize on loopback).
	check "net.ipv4.tcp_mem max (pages)" "$tcp_max" "$((conns / 2))" "sysctl -w net.ipv4.tcp_mem='$((conns / 2)) $((conns * 3 / 4)) $conns'"
	if [[ -r /proc/sys/net/netfilter/nf_conntrack_max ]] && (($(cat /proc/sys/net/netfilter/nf_conntrack_count) > 0)); then
		check "nf_conntrack_max (conntrack in use)" "$(cat /proc/sys/net/netfilter/nf_conntrack_max)" "$((2 * conns))" "sysctl -w net.netfilter.nf_conntrack_max=$((2 * conns))"
	fi
	avail_kb=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
	# Measured at 40,000: about 14 KiB per connection for both ends,
	# kernel, nodes and load processes together.
	check "MemAvailable (KiB)" "$avail_kb" "$((conns * 16))" "free memory, or fewer --conns"
} | tee "$out/limits.txt"
# Every limit too low, less the ones --set-sysctl fixed.
problems=$(($(grep -c '^  LOW' "$out/limits.txt" || true) - $(grep -c 'applying:' "$out/limits.txt" || true)))
if ((problems > 0)); then
	echo "million.sh: $problems limit(s) too low (above); fix them or run with --set-sysctl as root" >&2
	exit 1
fi

# ---- processes ----------------------------------------------------------
trap stop_all EXIT
trap 'log "stopped by a signal"; exit 130' INT TERM
start=$(date +%s)
( sleep "$timeout"; echo "million.sh: --timeout ${timeout}s reached" >&2; kill -TERM $$ ) &
PIDS+=($!)

if [[ -z $bin ]]; then
	bin=$out/wsgate
	build_wsgate "$bin"
fi
secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
key=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
run=m$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')
rport=$(free_port)
start_redis "$rport" "$out"
rcli() { redis-cli -p "$rport" "$@"; }
# Redis is one thread serving every node: with a hundred busy processes on
# the machine it must not wait for its turn (at 1,000,000 connections on 2
# cores, commands of a few microseconds took 250-320 ms in SLOWLOG and the
# nodes' calls timed out: a collapse of retries).
if ((EUID == 0)); then
	renice -n -10 -p "$REDIS_PID" >/dev/null && log "redis-server reniced to -10"
fi
log "redis on :$rport (pid $REDIS_PID), prefix $run; starting $nodes gateways"
ports=() gwpids=()
for i in $(seq 0 $((nodes - 1))); do
	port=$(free_port)
	start_gateway "$bin" "$port" "m$i" "$out/node$i.log" \
		WSGATE_REDIS_URL="redis://127.0.0.1:$rport/0" WSGATE_REDIS_PREFIX="$run" \
		WSGATE_JWT_SECRET="$secret" WSGATE_API_KEY="$key" WSGATE_LOG_LEVEL=warn
	ports+=("$port") gwpids+=("$GW_PID")
done
for p in "${ports[@]}"; do wait_healthy "http://127.0.0.1:$p" 60; done

snapshot() { # NAME: every raw figure at this moment, into DIR/NAME.*
	local name=$1
	cat /proc/meminfo >"$out/$name.meminfo"
	cat /proc/net/sockstat >"$out/$name.sockstat"
	rcli info all >"$out/$name.redis"
	: >"$out/$name.nodes"
	for i in "${!gwpids[@]}"; do
		local pid=${gwpids[i]} rss cpu
		rss=$(awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$pid/status")
		cpu=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
		echo "$i $pid $rss $cpu $(node_conns "http://127.0.0.1:${ports[i]}")" >>"$out/$name.nodes"
	done
	: >"$out/$name.loads"
	for pid in "${loadpids[@]}"; do
		awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$pid/status" 2>/dev/null >>"$out/$name.loads" || true
	done
	date +%s.%N >"$out/$name.time"
}
loadpids=()
snapshot before

# ---- connect ------------------------------------------------------------
ramp=$(awk -v r="$rate" -v n="$nodes" 'BEGIN { printf "%d", r / n < 1 ? 1 : r / n }')
log "opening $conns connections: $nodes load processes of $per, ${ramp}/s each, each joining room bench"
left=$conns
for i in $(seq 0 $((nodes - 1))); do
	n=$((left < per ? left : per))
	left=$((left - n))
	b=$((i % 250 + 1)) c=$((i / 250 + 1))
	GOGC=100 "$bin" bench connect --url "ws://127.0.0.1:${ports[i]}/ws" --api "http://127.0.0.1:${ports[i]}" \
		--conns "$n" --user-offset $((i * per)) --retry --join bench --jwt-secret "$secret" --api-key "$key" --listen --run-id "$run" \
		--source-ips "127.$c.$b.1-127.$c.$b.$ips_per" --ramp "$ramp" --dialing "$dialing" --settle "${timeout}s" --quiet \
		--json "$out/load$i.json" >"$out/load$i.txt" 2>&1 &
	loadpids+=($!)
	PIDS+=($!)
done
total_conns() {
	local t=0 p
	for p in "${ports[@]}"; do t=$((t + $(node_conns "http://127.0.0.1:$p"))); done
	echo "$t"
}
last=0 still=0 stopped=
while :; do
	sleep 5
	now=$(total_conns)
	log "connections open: $now of $conns"
	((now >= conns)) && break
	if ((now == last)); then still=$((still + 5)); else still=0; fi
	last=$now
	alive=0
	for p in "${loadpids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
	if ((still >= 60 || alive < nodes)); then
		stopped="connections stopped growing at $now ($alive of $nodes load processes alive)"
		log "$stopped; measuring what is open"
		break
	fi
	avail_mib=$(($(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) / 1024))
	if ((avail_mib < floor_mib)); then
		stopped="MemAvailable fell to $avail_mib MiB (floor $floor_mib MiB) at $now connections: ramps stopped"
		log "$stopped"
		kill -USR2 "${loadpids[@]}" 2>/dev/null || true
		sleep 20 # the handshakes in progress end
		break
	fi
done
echo "${stopped:-}" >"$out/stopped.txt"
connect_s=$(($(date +%s) - start))
sleep 15 # the nodes hand the handshakes' garbage back to the kernel after a burst
held=$(total_conns)
snapshot held

# ---- route refresh cost -------------------------------------------------
log "holding $held connections idle for ${window}s (route refresh every RouteTTL/3 = 30 s)"
sleep "$window"
snapshot idle

# ---- one broadcast ------------------------------------------------------
deliv() {
	local t=0 p
	for p in "${ports[@]}"; do
		t=$((t + $(curl -fsS "http://127.0.0.1:$p/metrics" | awk '$1 == "wsgate_messages_delivered_total" { printf "%d", $2 }')))
	done
	echo "$t"
}
d0=$(deliv)
log "one broadcast to all $held"
now_ns=$(date +%s%N)
curl -fsS -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
	-d "{\"target\":{\"type\":\"broadcast\"},\"event\":\"bench\",\"data\":{\"i\":0,\"r\":\"$run\",\"s\":0,\"t\":$now_ns,\"x\":\"\"}}" \
	"http://127.0.0.1:${ports[0]}/api/v1/publish" >"$out/broadcast.answer"
for _ in $(seq 120); do
	sleep 1
	(($(deliv) - d0 >= held)) && break
done
log "the nodes wrote $(($(deliv) - d0)) deliveries"
sleep 5 # the load processes read what the nodes wrote

# ---- close --------------------------------------------------------------
log "ending the hold; waiting for the load processes' reports"
kill -USR1 "${loadpids[@]}" 2>/dev/null || true
for _ in $(seq 300); do
	alive=0
	for p in "${loadpids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
	((alive)) || break
	sleep 1
done
kill -TERM "${loadpids[@]}" 2>/dev/null || true # a report still waiting for its leak check
wait "${loadpids[@]}" 2>/dev/null || true
snapshot after
stop_all
trap - EXIT

python3 - "$out" "$conns" "$nodes" "$held" "$window" "$connect_s" <<'PY' | tee "$out/report.txt"
import glob, json, os, re, statistics, sys
out, want, nodes, held, window, connect_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])

def kv(path, sep=":"):
    d = {}
    for line in open(path):
        if sep in line:
            k, v = line.split(sep, 1)
            d[k.strip()] = v.strip()
    return d
def meminfo(name):
    return {k: int(v.split()[0]) * 1024 for k, v in kv(f"{out}/{name}.meminfo").items()}
def redis(name):
    return kv(f"{out}/{name}.redis")
def nodes_of(name):
    rows = [l.split() for l in open(f"{out}/{name}.nodes")]
    return {int(r[0]): dict(pid=int(r[1]), rss=int(r[2]), cpu=int(r[3]), conns=int(r[4])) for r in rows}
def sockstat(name):
    d = {}
    for line in open(f"{out}/{name}.sockstat"):
        k, rest = line.split(":", 1)
        f = rest.split()
        for i in range(0, len(f) - 1, 2):
            d[f"{k} {f[i]}"] = int(f[i + 1])
    return d
def t(name):
    return float(open(f"{out}/{name}.time").read())
def kib(b):
    return f"{b / 1024:.2f} KiB"
clk = os.sysconf("SC_CLK_TCK")

rep = {"connections_wanted": want, "nodes": nodes, "connections_held": held, "connect_phase_s": connect_s}
lines = [f"wsgate: {held:,} of {want:,} connections held over {nodes} nodes (connect phase {connect_s} s)"]
stopped = open(f"{out}/stopped.txt").read().strip()
if stopped:
    lines.append(f"  short of the target: {stopped}")
rep["stopped"] = stopped
lines.append("")

# Nodes: RSS per connection, before -> held.
b, h = nodes_of("before"), nodes_of("held")
per = []
for i in sorted(h):
    c = h[i]["conns"]
    if c > 0:
        per.append(((h[i]["rss"] - b[i]["rss"]) / c, i, c, h[i]["rss"]))
vals = sorted(p[0] for p in per)
rep["node_rss_per_conn_bytes"] = {"max": max(vals), "median": statistics.median(vals), "min": min(vals),
                                  "per_node": [{"node": i, "connections": c, "rss_bytes": r, "rss_per_conn_bytes": v} for v, i, c, r in per]}
lines.append(f"node RSS per connection (after - before, /proc/PID/status): max {kib(max(vals))}, median {kib(statistics.median(vals))}, min {kib(min(vals))} "
             f"({'within' if max(vals) <= 1536 else 'ABOVE'} the 1.5 KiB target)")
lines.append("  per node: " + ", ".join(f"{kib(v)}" for v, *_ in per))

# Redis memory.
rb, rh = redis("before"), redis("held")
rm = int(rh["used_memory"]) - int(rb["used_memory"])
rep["redis_used_memory_per_conn_bytes"] = rm / held
rep["redis_used_memory_bytes"] = int(rh["used_memory"])
lines.append(f"Redis used_memory per connection: {rm / held:.0f} B ({int(rh['used_memory']) / 2**20:.0f} MiB in all; rss {int(rh['used_memory_rss']) / 2**20:.0f} MiB)")

# Machine memory.
mb, mh = meminfo("before"), meminfo("held")
avail = mb["MemAvailable"] - mh["MemAvailable"]
slab = mh["Slab"] - mb["Slab"]
loads = []
for f in sorted(glob.glob(f"{out}/load*.json")):
    try:
        loads.append(json.load(open(f)))
    except Exception as e:
        lines.append(f"  (unreadable {os.path.basename(f)}: {e})")
def loads_rss(name):
    try:
        return sum(int(x) for x in open(f"{out}/{name}.loads").read().split())
    except FileNotFoundError:
        return 0
load_rss = loads_rss("held")
node_rss = sum(x["rss"] - b[i]["rss"] for i, x in h.items())
sb, sh = sockstat("before"), sockstat("held")
rep["machine"] = {"mem_available_drop_bytes": avail, "per_conn_bytes": avail / held, "slab_growth_bytes": slab,
                  "slab_per_conn_bytes": slab / held, "load_processes_rss_bytes": load_rss,
                  "nodes_rss_growth_bytes": node_rss, "sockstat_before": sb, "sockstat_held": sh}
lines.append(f"machine memory per connection (MemAvailable drop): {kib(avail / held)} in all, both ends: "
             f"kernel Slab {kib(slab / held)}, nodes {kib(node_rss / held)}, load processes (RSS) {kib(load_rss / held)}, Redis {kib(rm / held)}")
lines.append(f"  sockstat: TCP inuse {sb.get('TCP inuse')} -> {sh.get('TCP inuse')}, mem {sb.get('TCP mem')} -> {sh.get('TCP mem')} pages; "
             f"sockets used {sb.get('sockets used')} -> {sh.get('sockets used')}")

# Route refresh: Redis and node CPU over the idle window.
ri = redis("idle")
rcpu = sum(float(ri[k]) - float(rh[k]) for k in ("used_cpu_sys", "used_cpu_user"))
ni = nodes_of("idle")
ncpu = sum(ni[i]["cpu"] - h[i]["cpu"] for i in ni) / clk
secs = t("idle") - t("held")
periods = secs / 30.0
rep["refresh"] = {"window_s": secs, "refresh_period_s": 30, "redis_cpu_s": rcpu, "nodes_cpu_s": ncpu,
                  "redis_cpu_per_period_per_conn_us": rcpu / periods / held * 1e6,
                  "nodes_cpu_per_period_per_conn_us": ncpu / periods / held * 1e6}
lines.append(f"idle hold {secs:.0f} s ({periods:.1f} route-refresh periods of 30 s): Redis CPU {rcpu:.2f} s, nodes' CPU {ncpu:.2f} s;"
             f" per period and connection: Redis {rcpu / periods / held * 1e6:.2f} us, nodes {ncpu / periods / held * 1e6:.2f} us"
             " (nodes: route refresh, pings every 25 s, heartbeats)")

# The broadcast: merge the load processes' histograms.
buckets, recv, dups, p99s, maxs = {}, 0, 0, [], []
for l in loads:
    ls = l.get("listen") or {}
    recv += ls.get("received", 0)
    dups += ls.get("duplicated", 0)
    lat = ls.get("latency", {})
    if lat.get("count"):
        p99s.append(lat["p99_ms"])
        maxs.append(lat["max_ms"])
    for bk in lat.get("histogram", []) or []:
        k = (bk["low_ms"], bk["high_ms"])
        buckets[k] = buckets.get(k, 0) + bk["count"]
def quantile(q):
    n = sum(buckets.values())
    if n == 0:
        return 0
    rank, seen = q * n, 0
    for (lo, hi), c in sorted(buckets.items()):
        seen += c
        if seen >= rank:
            return hi
    return max(hi for lo, hi in buckets)
merged = {"count": sum(buckets.values()), "p50_ms": quantile(0.5), "p99_ms": quantile(0.99), "max_ms": max(maxs) if maxs else 0}
rep["broadcast"] = {"received": recv, "duplicated": dups, "expected": held, "merged_latency": merged,
                    "max_of_process_p99_ms": max(p99s) if p99s else 0, "processes_reporting": len(p99s)}
lines.append(f"one broadcast: received {recv:,} of {held:,} ({dups} duplicated); merged histogram of {len(p99s)} processes: "
             f"p50 {merged['p50_ms']:.0f} ms, p99 {merged['p99_ms']:.0f} ms, max {merged['max_ms']:.0f} ms (bucket upper bounds); "
             f"largest per-process p99 {rep['broadcast']['max_of_process_p99_ms']:.0f} ms")

# Connect + join, from the load processes' own reports.
ok = sum(l["connections"]["succeeded"] for l in loads)
fails = {}
for l in loads:
    for k, v in (l["connections"].get("fail_reasons") or {}).items():
        fails[k] = fails.get(k, 0) + v
cpj = [l["derived"]["cpu_per_connect_s"] for l in loads if l["derived"].get("cpu_per_connect_s")]
ct99 = [l["connections"]["connect_time"]["p99_ms"] for l in loads if l["connections"]["connect_time"].get("count")]
rep["connect"] = {"succeeded": ok, "fail_reasons": fails, "node_cpu_per_connect_join_us_median": statistics.median(cpj) * 1e6 if cpj else 0,
                  "connect_join_p99_ms_max": max(ct99) if ct99 else 0}
lines.append(f"connect+join: {ok:,} succeeded, failures {fails or 'none'}; node CPU per connect+join median "
             f"{rep['connect']['node_cpu_per_connect_join_us_median']:.0f} us; connect+join p99 (worst process) {rep['connect']['connect_join_p99_ms_max']:.0f} ms")
json.dump(rep, open(f"{out}/report.json", "w"), indent=1)
print("\n".join(lines))
print(f"\nraw snapshots, logs and the load processes' reports: {out}")
PY
