# os2g — see README.md. `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(HOME)/go/bin:$(PATH)
GO ?= go

.PHONY: all build deps demo test test-short vet bench bench-quick gpu-check clean

all: build

build:
	$(GO) build -o bin/os2g ./cmd/os2g
	$(GO) build -o bin/os2g-csi ./cmd/os2g-csi

deps:
	bash scripts/install-deps.sh

# The main job on real data: local S3 server, Fashion-MNIST uploaded as an
# ImageFolder of PNGs, mounted, PyTorch trains a ResNet-18 from the mount,
# writes a checkpoint into it and reads it back.
demo: deps build
	bash scripts/demo.sh

# Every test: unit tests, real FUSE mounts, versitygw integration, e2e.
test: deps
	bash scripts/test.sh

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

bench: build
	bash scripts/install-deps.sh --bench
	$(GO) run ./bench --os2g bin/os2g

bench-quick: build
	bash scripts/install-deps.sh --bench
	$(GO) run ./bench --os2g bin/os2g --quick

gpu-check:
	bash scripts/gpu-check.sh

clean:
	rm -rf bin
