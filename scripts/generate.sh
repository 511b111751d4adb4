#!/bin/sh
# Generates the Go code of the protobuf API (proto/wsgate/v1) into OUT
# (default: the repository itself). The plugins are the tool versions of
# go.mod (protoc-gen-go, protoc-gen-connect-go); protoc comes from Debian's
# protobuf-compiler (scripts/install-test-deps.sh).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cd "$root"
go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bin/protoc-gen-connect-go" connectrpc.com/connect/cmd/protoc-gen-connect-go
PATH="$bin:$PATH" protoc -I proto \
	--go_out="$out" --go_opt=module=github.com/wsgate/wsgate \
	--connect-go_out="$out" --connect-go_opt=module=github.com/wsgate/wsgate \
	proto/wsgate/v1/api.proto
