#!/usr/bin/env bash
# make test: vet and format checks, then every Go test package against one
# versitygw on loopback (started here, stopped on exit). As root with
# /dev/fuse (CI), tests that need FUSE, versitygw or PyTorch must run:
# OS2G_REQUIRE_ALL=1 turns their skips into failures.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$HOME/go/bin:$PATH"

if [[ -z "${OS2G_REQUIRE_ALL:-}" && $(id -u) -eq 0 && -e /dev/fuse ]]; then
	export OS2G_REQUIRE_ALL=1
fi

echo "== go vet"
go vet ./...
unformatted=$(gofmt -l $(git ls-files '*.go') 2>/dev/null || true)
if [[ -n "$unformatted" ]]; then
	echo "gofmt needed:"; echo "$unformatted"; exit 1
fi

state=$(mktemp -d /tmp/os2g-test.XXXXXX)
cleanup() {
	bash scripts/versitygw.sh stop "$state/vgw" >/dev/null 2>&1 || true
	rm -rf "$state"
}
trap cleanup EXIT INT TERM
mkdir -p "$state/vgw"
eval "$(bash scripts/versitygw.sh start "$state/vgw")"
export OS2G_S3_ENDPOINT="$AWS_ENDPOINT_URL"
echo "== versitygw at $OS2G_S3_ENDPOINT"

# Every package under the race detector, FUSE mounts and end-to-end
# tests included (those mount for real and run the real binary).
log="$state/test.log"
status=0
echo "== go test -race ./..."
go test -race -count=1 -timeout 30m ./... 2>&1 | tee "$log" || status=1

passed=$(grep -cE '^ok\s' "$log" || true)
failed=$(grep -cE '^FAIL\s' "$log" || true)
echo "packages: $passed passed, $failed failed"
exit $status
