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
if [ ${#need[@]} -eq 0 ]; then
	echo "test dependencies present: $(redis-server --version | cut -d' ' -f1-3), $(nats-server --version), $(chromium --version 2>/dev/null | head -1), $(protoc --version), node $(node --version)"
	exit 0
fi
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
