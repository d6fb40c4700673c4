// Command os2g-csi is os2g's CSI node plugin: it serves the Container
// Storage Interface's Identity and Node services on a Unix socket, and
// mounts S3 buckets into pods by running one "os2g mount" daemon per volume
// per node (package github.com/os2g/os2g/internal/csi explains the model).
//
// Usage:
//
//	os2g-csi [--endpoint unix:///csi/csi.sock] [--node-id NAME] [--os2g PATH]
//	         [--state-dir DIR] [--driver-name NAME] [--debug]
//
// It runs as the node plugin container of the DaemonSet in
// deploy/kubernetes; docs/kubernetes.md is the user's guide. SIGTERM or
// SIGINT stop it: it stops serving, then stops every daemon it started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/os2g/os2g/internal/csi"
)

// version is set at link time: go build -ldflags "-X main.version=v0.1.0".
var version string

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "os2g-csi: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("os2g-csi", flag.ContinueOnError)
	endpoint := fs.String("endpoint", "unix:///csi/csi.sock", "CSI endpoint: unix:///PATH or a plain socket path")
	nodeID := fs.String("node-id", os.Getenv("NODE_NAME"), "this node's ID (default: $NODE_NAME, else the host name)")
	os2g := fs.String("os2g", "", "the os2g binary that serves mounts (default: os2g beside this binary, else on PATH)")
	stateDir := fs.String("state-dir", "/var/lib/os2g-csi", "directory of the daemons' staging mounts")
	driverName := fs.String("driver-name", csi.DefaultDriverName, "CSI driver name")
	debug := fs.Bool("debug", false, "log every CSI call")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		os.Exit(2)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if *nodeID == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--node-id not given and no host name: %w", err)
		}
		*nodeID = h
	}
	bin, err := findOs2g(*os2g)
	if err != nil {
		return err
	}
	v := version
	if v == "" {
		v = "dev"
	}
	d, err := csi.New(csi.Options{
		DriverName: *driverName,
		Version:    v,
		NodeID:     *nodeID,
		Os2gPath:   bin,
		StateDir:   *stateDir,
		Log:        log,
	})
	if err != nil {
		return err
	}
	defer d.Close()
	path, err := socketPath(*endpoint)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the old socket: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("serving", "driver", *driverName, "version", v, "node", *nodeID, "socket", path, "os2g", bin)
	return d.Serve(ctx, l)
}

// socketPath turns unix:///PATH, unix:PATH or PATH into a path.
func socketPath(ep string) (string, error) {
	p := ep
	if rest, ok := strings.CutPrefix(ep, "unix://"); ok {
		p = rest
	} else if rest, ok := strings.CutPrefix(ep, "unix:"); ok {
		p = rest
	} else if strings.Contains(ep, "://") {
		return "", fmt.Errorf("--endpoint %q: only unix sockets are supported", ep)
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("--endpoint %q: want an absolute socket path", ep)
	}
	return p, nil
}

// findOs2g resolves the os2g binary: the flag, else os2g beside this
// executable, else os2g on PATH.
func findOs2g(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "os2g")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	p, err := exec.LookPath("os2g")
	if err != nil {
		return "", errors.New("no os2g binary beside os2g-csi or on PATH; pass --os2g PATH")
	}
	return p, nil
}
