#!/usr/bin/env bash
# scripts/downstream-throughput.sh: records per second the nodes deliver from each downstream
# source (contract section 20) beside the HTTP batch API's rate for the same reliable user
# publishes. It starts a private Redis (master and one replica, free ports), a private
# nats-server with JetStream, and 3 gateway processes consuming a Redis stream and a JetStream
# subject and a Kafka topic (of KAFKA=host:port, a reachable broker; without it, of kfake,
# franz-go's fake broker, run by scripts/kfakebroker), once with WSGATE_RELIABLE_REPLICAS=0
# and once with 1. In each mode it
# runs `wsgate bench downstream` once per source and `wsgate bench push --reliable` (the batch
# API) with the same flags. Everything it starts is stopped when it ends.
#
#   scripts/downstream-throughput.sh [--out DIR] [--modes "0 1"] [-- BENCH FLAGS...]
#   scripts/downstream-throughput.sh -- --rate 200 --duration 2s --conns 50     # a quick check
#
# Default bench flags: --conns 1000 --rate 20000 --duration 20s --inflight 16 --settle 120s
# (a --rate above what the nodes take: the delivered rate is then what they sustain). The
# result table: DIR/result.txt, one line per mode and way in: records (or messages) written or
# accepted per second, delivered per second from the first write to the last receipt, lost,
# duplicated, latency p50/p99 (write or publish to receipt). Each run's report: DIR/*.txt and
# *.json; the processes' logs: DIR/*.log. Exit status 1 when a bench run failed a check.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/cluster-lib.sh"

out=/tmp/wsgate-downstream-$(date +%Y%m%d-%H%M%S)
modes="0 1"
while (($#)); do
	case $1 in
	--out) out=$2; shift 2 ;;
	--modes) modes=$2; shift 2 ;;
	--) shift; break ;;
	-h | --help) sed -n '2,20p' "$0"; exit 0 ;;
	*) echo "downstream-throughput.sh: unknown argument $1 (bench flags go after --)" >&2; exit 2 ;;
	esac
done
mkdir -p "$out"
trap stop_all EXIT
trap 'exit 130' INT TERM

bin=$out/wsgate
build_wsgate "$bin"
secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
key=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')

# Redis: the cluster backend and the Redis stream source; its replica confirms reliable
# publishes when WSGATE_RELIABLE_REPLICAS=1.
rport=$(free_port)
mkdir -p "$out/redis" "$out/replica"
start_redis "$rport" "$out/redis"
rrport=$(free_port)
redis-server --port "$rrport" --bind 127.0.0.1 --save '' --appendonly no --dir "$out/replica" \
	--replicaof 127.0.0.1 "$rport" --logfile "$out/replica/redis.log" &
PIDS+=("$!")
for _ in $(seq 100); do
	redis-cli -p "$rport" info replication 2>/dev/null | grep -q '^connected_slaves:1' && break
	sleep 0.1
done
redis-cli -p "$rport" info replication | grep -q '^connected_slaves:1' || { echo "the replica did not connect (see $out/replica/redis.log)" >&2; exit 1; }

# nats-server with JetStream, its store in DIR.
nport=$(free_port)
nats-server -a 127.0.0.1 -p "$nport" -js -sd "$out/nats" >"$out/nats.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$nport") 2>/dev/null && break
	sleep 0.1
done

tag=$$
declare -A sources=(
	[redis]="redis://127.0.0.1:$rport/0?stream=dsbench$tag"
	[nats]="nats://127.0.0.1:$nport?stream=DSBENCH$tag&subject=dsbench$tag"
)
names=(redis nats)
if [ -n "${KAFKA:-}" ]; then
	if (exec 3<>"/dev/tcp/${KAFKA%:*}/${KAFKA##*:}") 2>/dev/null; then
		sources[kafka]="kafka://$KAFKA/dsbench$tag"
		names+=(kafka)
	else
		echo "downstream-throughput: KAFKA=$KAFKA does not answer: Kafka skipped" | tee -a "$out/result.txt"
	fi
else
	# No broker given: kfake, franz-go's Kafka fake, as a one-broker Kafka in a
	# process of its own (its figures are wsgate's consumer over a fake broker
	# held in memory, not a Kafka cluster's).
	kport=$(free_port)
	go build -o "$out/kfakebroker" "$here/kfakebroker"
	"$out/kfakebroker" -addr "127.0.0.1:$kport" -partitions 3 >"$out/kfake.log" 2>&1 &
	PIDS+=("$!")
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$kport") 2>/dev/null && break
		sleep 0.1
	done
	sources[kafka]="kafka://127.0.0.1:$kport/dsbench$tag"
	names+=(kafka)
	echo "downstream-throughput: no KAFKA=host:port given: Kafka is kfake (scripts/kfakebroker), a fake broker in memory" | tee -a "$out/result.txt"
fi
dsurl=$(for n in "${names[@]}"; do printf '%s,' "${sources[$n]}"; done)
dsurl=${dsurl%,}

join_list() { local IFS=,; echo "$*"; }
status=0
printf '%-9s %-10s %12s %12s %9s %6s %9s %9s\n' replicas way "in/s" delivered/s lost dup p50 p99 | tee -a "$out/result.txt"

# row MODE WAY JSON: one line of the result table from a bench report.
row() {
	python3 - "$1" "$2" "$3" <<'EOF' | tee -a "$out/result.txt"
import json, sys
mode, way, path = sys.argv[1:]
r = json.load(open(path))
m, l = r["messages"], r.get("latency") or {}
# delivered per second from the first write (publish) to the last receipt: the
# publish phase (received / delivery_rate) plus the drain.
span = (m["received"] / m["delivery_rate"] if m["delivery_rate"] else 0) + m["drain_s"]
rate = m["received"] / span if span else 0
print(f'{mode:<9} {way:<10} {m["achieved_rate"]:12.0f} {rate:12.0f} {m["lost"]:9d} {m["duplicated"]:6d} {l.get("p50_ms", 0):7.1f}ms {l.get("p99_ms", 0):7.1f}ms')
EOF
}

# waits: the WAIT commands the master has run (reliable publishes confirmed by the replica).
waits() { redis-cli -p "$rport" info commandstats | awk -F'[=,:]' '$1 == "cmdstat_wait" { print $3; f = 1 } END { if (!f) print 0 }'; }

for mode in $modes; do
	waits0=$(waits)
	gws=() urls=() apis=()
	for i in 1 2 3; do
		port=$(free_port)
		start_gateway "$bin" "$port" "ds$i" "$out/node$i-replicas$mode.log" \
			WSGATE_REDIS_URL="redis://127.0.0.1:$rport/0" WSGATE_REDIS_PREFIX="ds$tag" \
			WSGATE_RELIABLE_REPLICAS="$mode" WSGATE_DOWNSTREAM_URL="$dsurl" \
			WSGATE_JWT_SECRET="$secret" WSGATE_API_KEY="$key" WSGATE_LOG_LEVEL=warn
		gws+=("$GW_PID") urls+=("ws://127.0.0.1:$port/ws") apis+=("http://127.0.0.1:$port")
		wait_healthy "http://127.0.0.1:$port" 30
	done
	common=(--url "$(join_list "${urls[@]}")" --api "$(join_list "${apis[@]}")" --jwt-secret "$secret" --api-key "$key"
		--conns 1000 --rate 20000 --duration 20s --inflight 16 --settle 120s --quiet)
	for way in "${names[@]}" batch-api; do
		name=replicas$mode-$way
		if [ "$way" = batch-api ]; then
			args=(push --reliable)
		else
			args=(downstream --source "${sources[$way]}")
		fi
		echo "== $name: wsgate bench ${args[*]} ${common[*]} $*" >>"$out/commands.txt"
		"$bin" bench "${args[@]}" "${common[@]}" --json "$out/$name.json" "$@" >"$out/$name.txt" 2>&1 || status=1
		row "$mode" "$way" "$out/$name.json" || status=1
	done
	for pid in "${gws[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${gws[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	echo "replicas $mode: the master ran $(($(waits) - waits0)) WAIT commands" | tee -a "$out/result.txt"
done
echo "downstream-throughput: exit status $status; reports in $out"
exit "$status"
