# Shared by scripts/million.sh and scripts/soak.sh (sourced, not run):
# a private Redis and gateway processes on loopback, every process
# recorded in PIDS and stopped by stop_all (installed as the EXIT trap).
#
# Needs: redis-server, curl, python3 (free ports), and a wsgate binary.

PIDS=()

# free_port prints a TCP port on 127.0.0.1 that nothing listens on now.
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# stop_all ends every process this script started (SIGTERM, then SIGKILL
# after 10 s), newest first.
stop_all() {
	local pid i
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		kill -TERM "${PIDS[i]}" 2>/dev/null || true
	done
	for _ in $(seq 100); do
		local alive=0
		for pid in "${PIDS[@]}"; do
			kill -0 "$pid" 2>/dev/null && alive=1
		done
		((alive)) || break
		sleep 0.1
	done
	for pid in "${PIDS[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
	done
	PIDS=()
}

# start_redis PORT DIR: a private redis-server on 127.0.0.1:PORT, no
# persistence; sets REDIS_PID.
start_redis() {
	local port=$1 dir=$2
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
		--maxclients 10000 --logfile "$dir/redis.log" &
	REDIS_PID=$!
	PIDS+=("$REDIS_PID")
	for _ in $(seq 100); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "redis-server on port $port did not start (see $dir/redis.log)" >&2
	return 1
}

# start_gateway BIN PORT NODE_ID LOG [ENV=VALUE...]: one gateway process
# on 127.0.0.1:PORT with the WSGATE_ settings in the environment; sets
# GW_PID.
start_gateway() {
	local bin=$1 port=$2 id=$3 log=$4
	shift 4
	env "$@" WSGATE_LISTEN="127.0.0.1:$port" WSGATE_NODE_ID="$id" "$bin" gateway >"$log" 2>&1 &
	GW_PID=$!
	PIDS+=("$GW_PID")
}

# wait_healthy URL SECONDS: until GET URL/healthz answers 200.
wait_healthy() {
	local url=$1 secs=$2
	for _ in $(seq $((secs * 10))); do
		curl -fsS -o /dev/null "$url/healthz" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "$url did not become healthy within ${secs}s" >&2
	return 1
}

# node_conns URL: the node's wsgate_connections.
node_conns() {
	curl -fsS "$1/metrics" 2>/dev/null | awk '$1 == "wsgate_connections" { printf "%d\n", $2; f = 1 } END { if (!f) print 0 }'
}

# build_wsgate OUT: go build the binary of this checkout into OUT.
build_wsgate() {
	local root
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	(cd "$root" && go build -o "$1" ./cmd/wsgate)
}
