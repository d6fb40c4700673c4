#!/usr/bin/env bash
# demo.sh — os2g end to end: Fashion-MNIST as 70,000 PNGs in an S3 bucket,
# an unmodified PyTorch ImageFolder/DataLoader training a ResNet-18 through an
# os2g mount, a checkpoint written into the mount and read back, and every
# file checked against the local copy.
#
#   bash scripts/demo.sh          (make demo)
#
# Needs (scripts/install-deps.sh): go, fuse3 (/dev/fuse, fusermount3),
# versitygw, /usr/bin/python3 with torch and torchvision, the Debian
# dataset-fashion-mnist package. Runs as root or as a user allowed to mount FUSE.
#
# Environment (optional):
#   OS2G_DEMO_DIR       work directory (default /tmp/os2g-demo); the PNG tree is
#                       cached there, so reruns skip the conversion
#   DEMO_STEPS          training steps (default 400, batch 64)
#   DEMO_MAX_SECONDS    stop training earlier after this long (default 180)
#   DEMO_WORKERS        DataLoader workers (default 4)
#   DEMO_VERIFY_SAMPLE  hash only this many random files (default 0: all 70,000)
#
# Exits 0 only if every check passes; cleans up (unmount, gateway) on any exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${OS2G_DEMO_DIR:-/tmp/os2g-demo}
PY=/usr/bin/python3
STEPS=${DEMO_STEPS:-400}
MAX_SECONDS=${DEMO_MAX_SECONDS:-180}
WORKERS=${DEMO_WORKERS:-4}
SAMPLE=${DEMO_VERIFY_SAMPLE:-0}
BUCKET=fashion-mnist
DATA=$WORK/fashion-mnist
MNT=$WORK/mnt
VGW=$WORK/versitygw
BIN=$WORK/bin/os2g
LOG=$WORK/os2g.log
T0=$SECONDS

say() { printf '\n==> %s\n' "$*"; }
fail() { printf '\ndemo: FAILED: %s\n' "$*" >&2; exit 1; }
is_mounted() { awk -v m="$1" '$2 == m { found = 1 } END { exit !found }' /proc/self/mounts; }

# daemon_pid: the os2g daemon's pid, from the "mounted ... pid=N" log line.
daemon_pid() { sed -n 's/.*msg=mounted .* pid=\([0-9]*\).*/\1/p' "$LOG" | tail -n 1; }

# unmount_and_wait: unmount MNT and wait (up to 30 s) for the daemon to exit.
unmount_and_wait() {
	local pid
	pid=$(daemon_pid)
	"$BIN" umount "$MNT"
	for _ in $(seq 1 300); do
		if [[ -z "$pid" ]] || ! kill -0 "$pid" 2>/dev/null; then
			is_mounted "$MNT" && fail "$MNT still mounted after os2g umount"
			return 0
		fi
		sleep 0.1
	done
	fail "os2g daemon (pid $pid) did not exit after unmount"
}

# run_child: run a long step in the background and wait for it, so that a
# signal to this script is handled at once (bash defers traps while a
# foreground command runs); cleanup stops the child.
CHILD=
run_child() {
	local rc=0
	"$@" &
	CHILD=$!
	wait "$CHILD" || rc=$?
	CHILD=
	return "$rc"
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n "$CHILD" ]]; then
		kill -TERM "$CHILD" 2>/dev/null || true
		wait "$CHILD" 2>/dev/null || true
	fi
	if is_mounted "$MNT"; then
		fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -u -z "$MNT" 2>/dev/null || true
	fi
	"$ROOT/scripts/versitygw.sh" stop "$VGW" 2>/dev/null || true
	if ((rc != 0)); then
		echo "demo: cleaned up after failure (exit $rc); daemon log: $LOG, gateway log: $VGW/versitygw.log" >&2
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for tool in go fusermount3 curl; do
	command -v "$tool" >/dev/null || fail "$tool not found (run scripts/install-deps.sh)"
done
[[ -e /dev/fuse ]] || fail "/dev/fuse missing (FUSE not available here)"
"$PY" -c 'import torch, torchvision' 2>/dev/null || fail "$PY cannot import torch and torchvision (apt install python3-torch python3-torchvision)"
[[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]] || fail "Fashion-MNIST not found (apt install dataset-fashion-mnist)"

mkdir -p "$WORK/bin"
# Leftovers of an interrupted run.
if is_mounted "$MNT"; then fusermount3 -u -z "$MNT" || true; fi
"$ROOT/scripts/versitygw.sh" stop "$VGW" 2>/dev/null || true
rm -rf "$VGW" "$WORK/train.json"
: >"$LOG"

say "1/8 building os2g"
t=$SECONDS
(cd "$ROOT" && go build -o "$BIN" ./cmd/os2g)
"$BIN" version
T_BUILD=$((SECONDS - t))

say "2/8 converting Fashion-MNIST to an ImageFolder tree of PNGs ($DATA)"
t=$SECONDS
run_child "$PY" "$ROOT/scripts/mkdataset.py" --out "$DATA"
NFILES=$(find "$DATA" -type f | wc -l)
T_DATA=$((SECONDS - t))

say "3/8 starting versitygw (posix backend, 127.0.0.1, free port)"
"$ROOT/scripts/versitygw.sh" start "$VGW" >/dev/null
# shellcheck disable=SC1091
. "$VGW/env"
export AWS_EC2_METADATA_DISABLED=true
unset AWS_PROFILE AWS_SESSION_TOKEN
echo "endpoint $AWS_ENDPOINT_URL"

say "4/8 uploading $NFILES files to s3://$BUCKET/ with os2g upload"
t=$SECONDS
run_child "$BIN" upload --create-bucket "$DATA" "s3://$BUCKET/"
T_UPLOAD=$((SECONDS - t))

say "5/8 mounting s3://$BUCKET at $MNT (read-write, background daemon)"
mkdir -p "$MNT"
METRICS=127.0.0.1:$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
t=$SECONDS
# The data set does not change while mounted: trust listed names for 10
# minutes (default 1 minute) so that a 3-minute run never revalidates them.
"$BIN" mount --metadata-ttl 10m --log-file "$LOG" --metrics-addr "$METRICS" "s3://$BUCKET" "$MNT"
is_mounted "$MNT" || fail "os2g mount returned 0 but $MNT is not mounted"
grep " $MNT " /proc/self/mounts
echo "top level: $(ls "$MNT" | tr '\n' ' ')"
T_MOUNT=$((SECONDS - t))

say "6/8 training ResNet-18 with ImageFolder + DataLoader(shuffle=True, num_workers=$WORKERS) over the mount"
t=$SECONDS
run_child "$PY" "$ROOT/scripts/train.py" --data "$MNT" --steps "$STEPS" --max-seconds "$MAX_SECONDS" --workers "$WORKERS" \
	--checkpoint "$MNT/checkpoints/resnet18.pt" --json "$WORK/train.json" || fail "training or checkpoint check failed"
T_TRAIN=$((SECONDS - t))
if curl -sf "http://$METRICS/metrics" -o "$WORK/metrics.txt"; then
	echo "daemon metrics (http://$METRICS/metrics):"
	grep -E '^(os2g_|prefetch_|fusefs_)' "$WORK/metrics.txt" | grep -v '_bucket{' | head -n 12 || true
	grep -E '^process_(resident_memory_bytes|cpu_seconds_total)' "$WORK/metrics.txt" || true
fi

say "7/8 verifying every file through the mount against the local tree (sha256)"
t=$SECONDS
run_child "$PY" "$ROOT/scripts/mkdataset.py" verify --local "$DATA" --mount "$MNT" --exclude checkpoints --sample "$SAMPLE" \
	>"$WORK/verify.txt" || { cat "$WORK/verify.txt"; fail "files read through the mount differ from the local tree"; }
cat "$WORK/verify.txt"
T_VERIFY=$((SECONDS - t))

say "8/8 remounting read-only and loading the checkpoint from the bucket"
t=$SECONDS
unmount_and_wait
"$BIN" mount --read-only --log-file "$LOG" "s3://$BUCKET" "$MNT"
"$PY" - "$MNT/checkpoints/resnet18.pt" <<'EOF' || fail "checkpoint not readable after remount"
import sys, torch, torchvision
state = torch.load(sys.argv[1], map_location="cpu")
m = torchvision.models.resnet18(num_classes=10)
m.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
m.load_state_dict(state["model"])
print(f"checkpoint from a fresh read-only mount: step {state['step']}, {len(state['model'])} tensors, loads into resnet18")
EOF
if touch "$MNT/should-fail" 2>/dev/null; then fail "write succeeded on a read-only mount"; fi
echo "write on the read-only mount refused, as it should be"
unmount_and_wait
"$ROOT/scripts/versitygw.sh" stop "$VGW"
T_FINAL=$((SECONDS - t))

read -r STEPS_DONE IMAGES IPS FIRST LAST ACC CKPT <<<"$("$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["steps"], r["images"], r["images_per_second"], round(r["first_loss"], 3), round(r["last_loss"], 3),
      round(100 * r.get("test_accuracy", 0), 1), round(r.get("checkpoint_bytes", 0) / 2**20, 1))
' "$WORK/train.json")"

cat <<EOF

================ os2g demo: all checks passed ================
 dataset        $NFILES PNGs (Fashion-MNIST), ${T_DATA}s to prepare
 upload         os2g upload to versitygw in ${T_UPLOAD}s
 mount          s3://$BUCKET at $MNT in ${T_MOUNT}s
 training       ResNet-18, $STEPS_DONE steps, $IMAGES images read through the mount
                loss $FIRST -> $LAST, $IPS images/s, test accuracy $ACC%
 checkpoint     $CKPT MiB torch.save into the mount, torch.load back: identical
 verify         $(cat "$WORK/verify.txt")
 remount        read-only: checkpoint loads, writes refused; unmounted cleanly
 time           build ${T_BUILD}s, train ${T_TRAIN}s, verify ${T_VERIFY}s, total $((SECONDS - T0))s
==============================================================
EOF
