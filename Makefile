# os2g — see README.md. `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(HOME)/go/bin:$(PATH)
GO ?= go
# Stamped into the binary (os2g --version); a checkout without git builds too.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: all build install deps demo test test-short vet bench bench-quick gpu-check soak clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/os2g ./cmd/os2g
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/os2g-csi ./cmd/os2g-csi

# Installs os2g, and /sbin/mount.fuse.os2g for mount(8) and /etc/fstab
# ("mount -t fuse.os2g s3://bucket/prefix /mnt/data -o read-only"), and the
# systemd unit template (docs/system.md).
PREFIX ?= /usr/local
SBINDIR ?= /sbin
UNITDIR ?= /etc/systemd/system
install: build
	install -D -m 0755 bin/os2g $(DESTDIR)$(PREFIX)/bin/os2g
	install -d $(DESTDIR)$(SBINDIR)
	ln -sf $(PREFIX)/bin/os2g $(DESTDIR)$(SBINDIR)/mount.fuse.os2g
	install -D -m 0644 deploy/systemd/os2g@.service $(DESTDIR)$(UNITDIR)/os2g@.service

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

# The fault-injection integrity pass at 100,000+ reads (not in CI): prints
# reads, faults injected by kind, errors by kind and the slowest read.
soak: deps
	bash scripts/soak.sh

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
