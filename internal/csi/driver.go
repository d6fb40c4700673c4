// Package csi is os2g's Container Storage Interface node plugin: Kubernetes
// (or any CSI container orchestrator) mounts an S3 bucket into pods through
// it, the way it mounts every other volume.
//
// The plugin offers the Identity and Node services of the CSI spec
// (github.com/container-storage-interface/spec, v1); there is no
// Controller service: volumes are provisioned statically, a
// PersistentVolume naming "s3://BUCKET[/PREFIX]" in its volume attribute
// "source" and the mount's options in other attributes or in its
// mountOptions (the table in options.go lists every one and the os2g mount
// flag it becomes).
//
// Concepts:
//
//   - One daemon per volume per node. The first NodePublishVolume of a
//     volume on a node starts "os2g mount --foreground" (the os2g binary,
//     Options.Os2gPath) on a staging directory of the plugin's own
//     (Options.StateDir/volumes/HASH/mnt), waits until that FUSE mount is
//     live, then bind-mounts it on the pod's target path. Later publishes
//     of the volume add bind mounts only. The last NodeUnpublishVolume
//     stops the daemon (SIGTERM: it unmounts and exits) and waits for it.
//   - Credentials come from the Secret named by the PersistentVolume's
//     nodePublishSecretRef (keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
//     AWS_SESSION_TOKEN) and reach the daemon only as environment
//     variables: never its command line, never a log line. Without a
//     secret the daemon uses the plugin's own AWS configuration chain.
//   - A daemon that died, or whose mount does not answer statfs within
//     5 s, is noticed on the next publish of its volume: logged with its
//     last output, stopped (SIGTERM, SIGKILL, then an abort of its FUSE
//     connection through fusectl), restarted, and every target of the
//     volume bound again to the new mount. Until then NodeGetVolumeStats
//     of the volume fails with Unavailable, saying so.
//   - Read-only: an access mode of the *_READER_ONLY kind or the volume
//     attribute readOnly/datasetMode starts the daemon with --read-only; a
//     publish with readonly=true gets a read-only bind mount.
//   - NodeUnpublishVolume is idempotent: a target that is not mounted, or
//     gone, succeeds.
//
// Daemons are children of the plugin: if the plugin process dies, so do
// they (their mounts then fail with ENOTCONN until the pods are
// rescheduled). On start the plugin clears staging mounts left behind.
package csi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// DefaultDriverName is the CSI driver name (the CSIDriver object's name and
// a PersistentVolume's spec.csi.driver).
const DefaultDriverName = "s3.csi.os2g.io"

// Options configures a Driver.
type Options struct {
	// DriverName is the plugin's name; default DefaultDriverName.
	DriverName string
	// Version is reported by GetPluginInfo; default "dev".
	Version string
	// NodeID is this node's ID (Kubernetes: the node name). Required.
	NodeID string
	// Os2gPath is the os2g binary that serves mounts. Required.
	Os2gPath string
	// StateDir holds the staging mounts (StateDir/volumes/HASH/mnt); it
	// must be on a file system the plugin can mount on. Required.
	StateDir string
	// ReadyTimeout bounds the wait for a daemon's mount to be live;
	// default 2 minutes. The request's own deadline also applies.
	ReadyTimeout time.Duration
	// StopGrace is how long a daemon gets to exit after SIGTERM before
	// SIGKILL; default 30 seconds.
	StopGrace time.Duration
	// Env is the environment daemons start from (before the publish
	// secret's credentials); default os.Environ().
	Env []string
	// Log receives the plugin's and the daemons' log lines; default
	// slog.Default().
	Log *slog.Logger
}

// Driver is the CSI Identity and Node service. It is safe for concurrent
// use; calls for one volume are serialised.
type Driver struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer

	opt Options
	log *slog.Logger

	mu      sync.Mutex         // guards vols, closed
	vols    map[string]*volume // by volume ID
	closed  bool
	serveWG sync.WaitGroup
}

var (
	_ csipb.IdentityServer = (*Driver)(nil)
	_ csipb.NodeServer     = (*Driver)(nil)
)

// volume is a volume published on this node. Its fields are guarded by mu,
// held for the whole of a publish or unpublish of the volume.
type volume struct {
	mu      sync.Mutex
	id      string
	staging string          // the daemon's mount point
	spec    mountSpec       // what the daemon was started with
	credKey string          // hash of the publish secret's credentials
	d       *daemon         // nil when not running
	targets map[string]bool // target path -> read-only bind
	single  bool            // published SINGLE_NODE_SINGLE_WRITER: one target only
	removed bool            // dropped from Driver.vols; callers start over
}

// New validates o and returns a Driver. It clears staging mounts left in
// StateDir by an earlier run (their daemons died with it).
func New(o Options) (*Driver, error) {
	if o.DriverName == "" {
		o.DriverName = DefaultDriverName
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.NodeID == "" {
		return nil, errors.New("csi: Options.NodeID is required")
	}
	if o.Os2gPath == "" {
		return nil, errors.New("csi: Options.Os2gPath is required")
	}
	if o.StateDir == "" {
		return nil, errors.New("csi: Options.StateDir is required")
	}
	if o.ReadyTimeout < 0 || o.StopGrace < 0 {
		return nil, errors.New("csi: ReadyTimeout and StopGrace must not be negative")
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
	if o.StopGrace == 0 {
		o.StopGrace = 30 * time.Second
	}
	if o.Env == nil {
		o.Env = os.Environ()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	abs, err := filepath.Abs(o.StateDir)
	if err != nil {
		return nil, fmt.Errorf("csi: StateDir: %w", err)
	}
	o.StateDir = abs
	if err := os.MkdirAll(filepath.Join(abs, "volumes"), 0o700); err != nil {
		return nil, fmt.Errorf("csi: StateDir: %w", err)
	}
	if st, err := os.Stat(o.Os2gPath); err != nil {
		return nil, fmt.Errorf("csi: os2g binary: %w", err)
	} else if st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("csi: os2g binary %s is not an executable file", o.Os2gPath)
	}
	d := &Driver{opt: o, log: o.Log, vols: map[string]*volume{}}
	d.clearStale()
	return d, nil
}

// clearStale unmounts staging directories left mounted by an earlier run.
func (d *Driver) clearStale() {
	dirs, _ := filepath.Glob(filepath.Join(d.opt.StateDir, "volumes", "*", "mnt"))
	for _, mnt := range dirs {
		if err := unmountAll(mnt); err != nil {
			d.log.Warn("clearing a staging mount left by an earlier run", "staging", mnt, "err", err)
			continue
		}
		os.Remove(mnt)
		os.Remove(filepath.Dir(mnt))
	}
}

// Serve answers CSI calls on l until ctx ends, then stops the gRPC server
// (in-flight calls finish). It does not stop the daemons: Close does.
func (d *Driver) Serve(ctx context.Context, l net.Listener) error {
	srv := grpc.NewServer(grpc.UnaryInterceptor(d.logCall))
	csipb.RegisterIdentityServer(srv, d)
	csipb.RegisterNodeServer(srv, d)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			srv.GracefulStop()
		case <-done:
		}
	}()
	err := srv.Serve(l)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// logCall logs each call's method, volume ID, target and result: never the
// request itself, which may carry secrets.
func (d *Driver) logCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := h(ctx, req)
	attrs := []any{"method", info.FullMethod, "took", time.Since(start).Round(time.Millisecond)}
	if r, ok := req.(interface{ GetVolumeId() string }); ok && r.GetVolumeId() != "" {
		attrs = append(attrs, "volume", r.GetVolumeId())
	}
	if r, ok := req.(interface{ GetTargetPath() string }); ok && r.GetTargetPath() != "" {
		attrs = append(attrs, "target", r.GetTargetPath())
	}
	if err != nil {
		d.log.Warn("csi call failed", append(attrs, "err", err)...)
	} else {
		d.log.Debug("csi call", attrs...)
	}
	return resp, err
}

// Close stops every daemon and unmounts every target the driver mounted.
// Calls after Close fail with Unavailable.
func (d *Driver) Close() {
	d.mu.Lock()
	d.closed = true
	vols := d.vols
	d.vols = map[string]*volume{}
	d.mu.Unlock()
	for _, v := range vols {
		v.mu.Lock()
		for t := range v.targets {
			if err := unmountAll(t); err != nil {
				d.log.Warn("close: unmount target", "volume", v.id, "target", t, "err", err)
			}
		}
		if v.d != nil {
			v.d.stop(d.log, v.id, d.opt.StopGrace)
			v.d = nil
		}
		os.Remove(v.staging)
		os.Remove(filepath.Dir(v.staging))
		v.removed = true
		v.mu.Unlock()
	}
}

// lockVolume returns the volume's state, created if needed, with its mutex
// held.
func (d *Driver) lockVolume(id string) (*volume, error) {
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, status.Error(codes.Unavailable, "the plugin is shutting down")
		}
		v, ok := d.vols[id]
		if !ok {
			sum := sha256.Sum256([]byte(id))
			v = &volume{
				id:      id,
				staging: filepath.Join(d.opt.StateDir, "volumes", hex.EncodeToString(sum[:16]), "mnt"),
				targets: map[string]bool{},
			}
			d.vols[id] = v
		}
		d.mu.Unlock()
		v.mu.Lock()
		if !v.removed {
			return v, nil
		}
		v.mu.Unlock()
	}
}

// dropIfIdle removes v from the driver's map when it has no daemon and no
// target. Called with v.mu held.
func (d *Driver) dropIfIdle(v *volume) {
	if v.d != nil || len(v.targets) > 0 {
		return
	}
	d.mu.Lock()
	if d.vols[v.id] == v {
		delete(d.vols, v.id)
	}
	d.mu.Unlock()
	v.removed = true
}

// GetPluginInfo returns the driver's name and version.
func (d *Driver) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: d.opt.DriverName, VendorVersion: d.opt.Version}, nil
}

// GetPluginCapabilities returns no capability: the plugin offers no
// Controller service and no topology.
func (d *Driver) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{}, nil
}

// Probe reports ready once the driver is constructed (New checked the os2g
// binary and the state directory).
func (d *Driver) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, status.Error(codes.Unavailable, "the plugin is shutting down")
	}
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}
