#!/usr/bin/env bash
# make soak: the fault-injection integrity pass of package faults at soak
# size (not in CI): OS2G_SOAK_READS reads per mode (default 100000) of
# OS2G_SOAK_FILES files (default 2000), default and dataset mode, through
# a FaultProxy faulting about 5% of requests in front of versitygw. Prints,
# per mode: reads, faults injected by kind, errors by kind, slowest read.
# Needs root, /dev/fuse and versitygw (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"
export OS2G_SOAK_READS="${OS2G_SOAK_READS:-100000}"
export OS2G_SOAK_FILES="${OS2G_SOAK_FILES:-2000}"
echo "== soak: $OS2G_SOAK_READS reads per mode of $OS2G_SOAK_FILES files"
go test -count=1 -timeout 4h -run 'TestIntegrityUnderFaults$' -v ./faults/ 2>&1 |
	grep -E '^(faults |--- |ok|FAIL|panic)|faults_test.go'
