#!/usr/bin/env bash
# Installs everything os2g's tests and demo need on a fresh Debian machine:
# fuse3, Debian's PyTorch and torchvision, the Fashion-MNIST data set, and
# versitygw (the S3 server used by integration tests). With --bench it also
# installs the benchmark peers and tools (fio, s3fs, rclone).
# Idempotent: what is present is skipped.
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"

pkgs=(fuse3 python3-venv python3-pip python3-setuptools python3-torch python3-torchvision python3-numpy python3-pil dataset-fashion-mnist)
if [[ "${1:-}" == "--bench" ]]; then
	pkgs+=(fio s3fs rclone)
fi
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "install-deps: apt-get install ${missing[*]}"
	SUDO=""
	[[ $(id -u) -ne 0 ]] && SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

gobin="$(go env GOPATH)/bin"
if ! [[ -x "$gobin/versitygw" ]]; then
	echo "install-deps: go install versitygw v1.8.0"
	(cd /tmp && GOFLAGS=-mod=mod go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)
fi
echo "install-deps: ok"
