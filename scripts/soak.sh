#!/usr/bin/env bash
# scripts/soak.sh: the soak on 3 nodes: a private Redis (free port, own
# key prefix), 3 gateway processes and `wsgate bench soak` against them
# (15,000 connections, 200 reopened per second, 5,000 reliable user
# messages and one broadcast per second, 10 minutes). Everything it starts
# is stopped when it ends. Exit status: the bench's (0 = every check ok).
#
#   scripts/soak.sh [--out DIR] [--nodes N] [-- BENCH FLAGS...]
#   scripts/soak.sh -- --duration 2m --conns 3000       # a shorter soak
#
# The report: DIR/soak.txt, DIR/soak.json, DIR/soak.html (with the node
# series), the nodes' logs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/cluster-lib.sh"

out=/tmp/wsgate-soak-$(date +%Y%m%d-%H%M%S)
nodes=3
while (($#)); do
	case $1 in
	--out) out=$2; shift 2 ;;
	--nodes) nodes=$2; shift 2 ;;
	--) shift; break ;;
	-h | --help) sed -n '2,14p' "$0"; exit 0 ;;
	*) echo "soak.sh: unknown argument $1 (bench flags go after --)" >&2; exit 2 ;;
	esac
done
mkdir -p "$out"
trap stop_all EXIT
trap 'exit 130' INT TERM

bin=$out/wsgate
build_wsgate "$bin"
secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
key=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
rport=$(free_port)
start_redis "$rport" "$out"
urls=() apis=()
for i in $(seq "$nodes"); do
	port=$(free_port)
	start_gateway "$bin" "$port" "soak$i" "$out/node$i.log" \
		WSGATE_REDIS_URL="redis://127.0.0.1:$rport/0" WSGATE_REDIS_PREFIX="soak$$" \
		WSGATE_JWT_SECRET="$secret" WSGATE_API_KEY="$key" WSGATE_LOG_LEVEL=warn
	urls+=("ws://127.0.0.1:$port/ws") apis+=("http://127.0.0.1:$port")
	wait_healthy "http://127.0.0.1:$port" 30
done
join_list() { local IFS=,; echo "$*"; }
echo "soak: redis :$rport, nodes ${apis[*]}, report in $out"
set +e
"$bin" bench soak --url "$(join_list "${urls[@]}")" --api "$(join_list "${apis[@]}")" \
	--jwt-secret "$secret" --api-key "$key" --source-ips 127.0.0.2-127.0.0.40 \
	--conns 15000 --churn-rate 200 --rate 5000 --broadcast-rate 1 \
	--json "$out/soak.json" --html "$out/soak.html" "$@" | tee "$out/soak.txt"
status=${PIPESTATUS[0]}
set -e
echo "soak: exit status $status; report in $out"
exit "$status"
