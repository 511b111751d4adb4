#!/usr/bin/env bash
# fail-summary.sh LOG: the failed Go tests of a `go test` log, each with its
# own messages (the lines its t.Error/t.Fatal calls printed) and at most
# 30 lines of them, and any panic: printed at the end of `make test`, so
# that the tail of a long log says why a test failed.
set -u
log=${1:?usage: fail-summary.sh LOG}
[ -r "$log" ] || exit 0
grep -q -E '^(--- FAIL|panic:|FAIL)' "$log" || exit 0
echo "==== failed Go tests (from $log) ===="
awk '
	/^(\s*)--- FAIL/ { print; n = 0; keep = 1; next }
	/^panic:/ { print; n = 0; keep = 2; next }
	/^(ok|FAIL|---|===)/ { keep = 0 }
	keep == 1 && /^\s+[A-Za-z0-9_]+\.go:[0-9]+: / && n < 30 { print; n++ }
	keep == 2 && n < 40 { print; n++ }
	/^FAIL\t/ { print }
' "$log"
echo "===="
