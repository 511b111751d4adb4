#!/usr/bin/env bash
# pusher-memory.sh WSGATE_BIN [CONNS] [OUTDIR]: the memory an idle connection costs a node with
# wsgate's own protocol (/ws) and with the Pusher protocol (/app/{key}, subscribed to nothing),
# CONNS connections each (default 10000), each against a fresh `wsgate dev`, opened and held by
# the same load client (scripts/idleconns). The node's RSS (VmRSS) is read once it is ready and
# again 10 s after the last connection got its first frame; one line per protocol at the end:
# the RSS added, per connection. With SOKETI=CMD (a command starting soketi on port 6001 with
# app key app-key), the same is measured against soketi.
set -eu
bin=$1
conns=${2:-10000}
out=${3:-/tmp/pusher-memory}
mkdir -p "$out"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
here=$(cd "$(dirname "$0")/.." && pwd)
(cd "$here" && go build -o "$out/idleconns" ./scripts/idleconns)

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# measure ID NAME PID URL: the RSS PID adds for CONNS idle connections to URL.
measure() {
	local id=$1 name=$2 pid=$3 url=$4
	local before after client
	before=$(rss_kb "$pid")
	"$out/idleconns" -n "$conns" -url "$url" >"$out/client-$id.txt" 2>&1 &
	client=$!
	pids+=("$client")
	for _ in $(seq 1200); do
		if grep -q '^ready' "$out/client-$id.txt"; then break; fi
		if ! kill -0 "$client" 2>/dev/null; then echo "$name: the client failed: $(cat "$out/client-$id.txt")"; return 1; fi
		sleep 0.1
	done
	sleep 10
	after=$(rss_kb "$pid")
	kill "$client"
	wait "$client" 2>/dev/null || true
	echo "$name: $conns idle connections: RSS $((before / 1024)) MiB -> $((after / 1024)) MiB, $(((after - before) * 1024 / conns)) bytes per connection" | tee -a "$out/result.txt"
}

wait_port() {
	for _ in $(seq 200); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.05
	done
	return 1
}

: >"$out/result.txt"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
port=39600
for proto in wsgate pusher; do
	port=$((port + 1))
	WSGATE_TRANSPORTS=ws,pusher WSGATE_PUSHER_APP_ID=1 WSGATE_PUSHER_KEY=app-key WSGATE_PUSHER_SECRET=app-secret-0123456789abcdef \
		"$bin" dev --listen "127.0.0.1:$port" >"$out/dev-$proto.log" 2>&1 &
	pid=$!
	pids+=("$pid")
	wait_port "$port"
	case $proto in
	wsgate) measure ws "wsgate /ws" "$pid" "ws://127.0.0.1:$port/ws?user=u{i}" ;;
	pusher) measure pusher "wsgate /app (Pusher)" "$pid" "ws://127.0.0.1:$port/app/app-key?protocol=7" ;;
	esac
	kill "$pid"
	wait "$pid" 2>/dev/null || true
done
if [ -n "${SOKETI:-}" ]; then
	$SOKETI >"$out/soketi.log" 2>&1 &
	pid=$!
	pids+=("$pid")
	wait_port 6001
	measure soketi "soketi (Pusher)" "$pid" "ws://127.0.0.1:6001/app/app-key?protocol=7"
	kill "$pid"
fi
