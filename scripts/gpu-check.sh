#!/usr/bin/env bash
# gpu-check.sh: check gdd's CUDA backend on a GPU machine that has no Go.
#
#   scripts/gpu-check.sh --build      # where Go is: build bin/gpu/gdd.test and bin/gpu/gddserve
#   scripts/gpu-check.sh [BIN_DIR]    # on the GPU machine (BIN_DIR default bin/gpu)
#
# The binaries are CGO_ENABLED=0 builds; they need only glibc's dynamic
# loader and, at run time, the NVIDIA driver (libcuda.so.1).
# Steps, each under a timeout, results under $OUT (default bin/gpu-check-out):
#   1. nvidia-smi                       -> nvidia-smi.txt
#   2. CUDA tests of the gdd test binary (OS2G_REQUIRE_GPU=1: no silent skip)
#                                       -> cuda-tests.txt
#   3. benchmarks: BenchmarkPlaceCUDA (256 MiB from an in-memory store into
#      device memory), BenchmarkCUDACopyBaseline (raw pinned H2D), and the
#      sim BenchmarkPlace               -> bench.txt
#   4. if python3 has torch with CUDA: gddserve -backend cuda and
#      python/tests/test_cuda_torch.py  -> python-cuda.txt
# summary.txt lists PASS/FAIL/SKIP per step; the exit status is 1 if any failed.
set -u
here="$(cd "$(dirname "$0")/.." && pwd)"

if [ "${1:-}" = "--build" ]; then
	mkdir -p "$here/bin/gpu"
	cd "$here" || exit 1
	CGO_ENABLED=0 go test -c -o bin/gpu/gdd.test ./gdd || exit 1
	CGO_ENABLED=0 go build -o bin/gpu/gddserve ./cmd/gddserve || exit 1
	echo "built $here/bin/gpu/gdd.test and $here/bin/gpu/gddserve"
	exit 0
fi

bin="$(cd "${1:-$here/bin/gpu}" && pwd)" || { echo "no binary dir; run $0 --build where Go is" >&2; exit 1; }
OUT="${OUT:-$here/bin/gpu-check-out}"
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: >"$summary"
failed=0
note() { echo "$1 $2" | tee -a "$summary"; }

# 1. the device
if command -v nvidia-smi >/dev/null; then
	timeout 60 nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 && note PASS nvidia-smi || note FAIL nvidia-smi
else
	note SKIP "nvidia-smi (not installed)"
fi

# 2. CUDA tests (run in gdd/ so testdata/ is found; the fake-driver test needs cc)
cd "$here/gdd" || exit 1
if OS2G_REQUIRE_GPU=1 timeout 300 "$bin/gdd.test" -test.run 'CUDA' -test.v -test.count=1 >"$OUT/cuda-tests.txt" 2>&1; then
	note PASS cuda-tests
else
	note FAIL "cuda-tests (see cuda-tests.txt)"
	failed=1
fi

# 3. benchmarks
if timeout 300 "$bin/gdd.test" -test.run '^$' -test.bench 'BenchmarkPlaceCUDA|BenchmarkCUDACopyBaseline|BenchmarkPlace$' \
	-test.benchtime 10x -test.benchmem >"$OUT/bench.txt" 2>&1; then
	note PASS "bench ($(awk '/^Benchmark/ { for (i = 2; i <= NF; i++) if ($i == "MB/s") printf "%s=%s MB/s; ", $1, $(i-1) }' "$OUT/bench.txt"))"
else
	note FAIL "bench (see bench.txt)"
	failed=1
fi

# 4. PyTorch through the socket
py="$(command -v python3 || true)"
if [ -n "$py" ] && "$py" -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	tmp="$(mktemp -d)"
	mkdir -p "$tmp/data"
	"$bin/gddserve" -backend cuda -dir "$tmp/data" -socket "$tmp/gdd.sock" >"$OUT/gddserve.log" 2>&1 &
	srv=$!
	for _ in $(seq 50); do [ -S "$tmp/gdd.sock" ] && break; sleep 0.2; done
	if PYTHONPATH="$here/python" OS2G_GDD_SOCKET="$tmp/gdd.sock" OS2G_GDD_DIR="$tmp/data" timeout 300 "$py" "$here/python/tests/test_cuda_torch.py" -v \
		>"$OUT/python-cuda.txt" 2>&1; then
		note PASS "python-cuda ($(grep -o 'throughput.*' "$OUT/python-cuda.txt" || true))"
	else
		note FAIL "python-cuda (see python-cuda.txt)"
		failed=1
	fi
	kill "$srv" 2>/dev/null
	wait "$srv" 2>/dev/null
	rm -rf "$tmp"
else
	note SKIP "python-cuda (no python3 with torch+CUDA)"
fi

exit "$failed"
