#!/usr/bin/env bash
# transport-memory.sh WSGATE_BIN [CONNS] [OUTDIR]: the memory an idle connection costs a node on
# each transport (websocket, sse, stream; contract §18), CONNS connections each (default 10000)
# against a fresh `wsgate dev`, measured by `wsgate bench connect` (RSS and heap per connection
# after the settle). One line per transport at the end; the whole reports in OUTDIR.
set -eu
bin=$1
conns=${2:-10000}
out=${3:-/tmp/transport-memory}
mkdir -p "$out"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
port=39500
for tr in websocket sse stream; do
	port=$((port + 1))
	"$bin" dev --listen "127.0.0.1:$port" >"$out/dev-$tr.log" 2>&1 &
	pid=$!
	for _ in $(seq 200); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
		sleep 0.05
	done
	"$bin" bench connect --url "ws://127.0.0.1:$port/ws" --metrics "http://127.0.0.1:$port/metrics" \
		--transport "$tr" --conns "$conns" --settle 10s --quiet >"$out/bench-$tr.txt" 2>&1 || true
	kill "$pid"
	wait "$pid" 2>/dev/null || true
done
for tr in websocket sse stream; do
	echo "$tr: $(grep -m1 'per connection' "$out/bench-$tr.txt" | sed 's/^ *//')"
done
