package csi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NodeGetInfo returns the node ID; no volume limit, no topology.
func (d *Driver) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: d.opt.NodeID}, nil
}

// NodeGetCapabilities returns GET_VOLUME_STATS, SINGLE_NODE_MULTI_WRITER
// (the access modes SINGLE_NODE_SINGLE_WRITER and SINGLE_NODE_MULTI_WRITER
// are told apart), and nothing else: no stage/unstage (the plugin shares a
// daemon between publishes itself), no expansion.
func (d *Driver) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	var caps []*csipb.NodeServiceCapability
	for _, c := range []csipb.NodeServiceCapability_RPC_Type{
		csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csipb.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csipb.NodeServiceCapability{
			Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: c}},
		})
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// healthTimeout bounds the statfs that tells a serving daemon from a hung
// one at each publish.
const healthTimeout = 5 * time.Second

// readerOnly reports whether an access mode allows no writer.
func readerOnly(m csipb.VolumeCapability_AccessMode_Mode) bool {
	return m == csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY ||
		m == csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
}

// credKey is a hash of the daemon's credential environment, to tell two
// secrets apart without keeping them.
func credKey(env []string) string {
	if len(env) == 0 {
		return ""
	}
	sum := sha256.Sum256([]byte(strings.Join(env, "\x00")))
	return hex.EncodeToString(sum[:])
}

// NodePublishVolume mounts the volume at req.TargetPath: it starts the
// volume's daemon if none runs on this node (or restarts a dead one),
// waits for its mount, and bind-mounts it on the target (read-only when
// req.Readonly). Errors: InvalidArgument for a bad request, attribute or
// secret; AlreadyExists when the target holds this volume published
// differently; FailedPrecondition when the volume runs on this node with
// other options or credentials, when a SINGLE_NODE_SINGLE_WRITER volume
// is published at a second target, or when os2g cannot mount it (missing
// bucket, rejected credentials: the message names the volume and carries
// os2g's own one-line reason); Internal for a failed bind mount. On any
// error nothing new is left mounted.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing in request")
	}
	if req.GetTargetPath() == "" {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: target path missing in request", id)
	}
	target := filepath.Clean(req.GetTargetPath())
	if !filepath.IsAbs(target) {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: target path %q is not absolute", id, req.GetTargetPath())
	}
	vc := req.GetVolumeCapability()
	if vc == nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: volume capability missing in request", id)
	}
	if vc.GetBlock() != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: block access is not supported (an S3 bucket is a file system volume)", id)
	}
	mode := vc.GetAccessMode().GetMode()
	if mode == csipb.VolumeCapability_AccessMode_UNKNOWN {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: access mode missing or unknown", id)
	}
	var mountFlags []string
	if m := vc.GetMount(); m != nil {
		if m.GetFsType() != "" && m.GetFsType() != "fuse" && m.GetFsType() != "os2g" {
			return nil, status.Errorf(codes.InvalidArgument, "volume %q: fsType %q is not supported (leave it empty)", id, m.GetFsType())
		}
		mountFlags = m.GetMountFlags()
	}
	spec, err := buildSpec(req.GetVolumeContext(), mountFlags, readerOnly(mode))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: %v", id, err)
	}
	creds, err := credentialEnv(req.GetSecrets())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: %v", id, err)
	}
	ro := req.GetReadonly() || spec.readOnly()
	ck := credKey(creds)

	v, err := d.lockVolume(id)
	if err != nil {
		return nil, err
	}
	defer v.mu.Unlock()
	defer d.dropIfIdle(v)

	healthy := v.d != nil && v.d.healthy(healthTimeout)
	if old, ok := v.targets[target]; ok {
		if old == ro && v.spec.key() == spec.key() && v.credKey == ck {
			if healthy {
				return &csipb.NodePublishVolumeResponse{}, nil
			}
		} else {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q is already published at %s with other options or read-only flag", id, target)
		}
	}
	single := mode == csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	if _, here := v.targets[target]; !here && len(v.targets) > 0 && (single || v.single) {
		return nil, status.Errorf(codes.FailedPrecondition,
			"volume %q is SINGLE_NODE_SINGLE_WRITER and already published on this node at another target", id)
	}
	if v.d != nil && (v.spec.key() != spec.key() || v.credKey != ck) {
		return nil, status.Errorf(codes.FailedPrecondition,
			"volume %q already runs on this node with other options or credentials (%s %s); unpublish it from every pod of this node first",
			id, v.spec.source, strings.Join(v.spec.flags, " "))
	}
	if v.d != nil && !healthy {
		if v.d.alive() {
			d.log.Warn("the volume's os2g daemon does not answer; stopping and restarting it", "volume", id,
				"pid", v.d.cmd.Process.Pid, "last_output", v.d.tail.message(), "targets", len(v.targets))
		} else {
			d.log.Warn("the volume's os2g daemon died; restarting it", "volume", id,
				"exit", v.d.waitErr, "last_output", v.d.tail.message(), "targets", len(v.targets))
		}
		v.d.stop(d.log, id, d.opt.StopGrace)
		if v.d.alive() {
			return nil, status.Errorf(codes.Internal, "volume %q: its os2g daemon (pid %d) does not answer and cannot be stopped", id, v.d.cmd.Process.Pid)
		}
		v.d = nil
	}
	if v.d == nil {
		if err := os.MkdirAll(v.staging, 0o755); err != nil {
			return nil, status.Errorf(codes.Internal, "volume %q: staging directory: %v", id, err)
		}
		dm, err := startDaemon(ctx, d.log, d.opt.Os2gPath, spec, v.staging, daemonEnv(d.opt.Env, creds), d.opt.ReadyTimeout, id)
		if err != nil {
			os.Remove(v.staging)
			os.Remove(filepath.Dir(v.staging))
			switch {
			case ctx.Err() != nil:
				return nil, status.FromContextError(ctx.Err()).Err()
			case errors.Is(err, errDaemonExited):
				return nil, status.Errorf(codes.FailedPrecondition, "volume %q: os2g could not mount %s: %v", id, spec.source, err)
			default:
				return nil, status.Errorf(codes.Internal, "volume %q: mounting %s: %v", id, spec.source, err)
			}
		}
		v.d, v.spec, v.credKey = dm, spec, ck
		// Targets left from a daemon that died (or from a failed restart)
		// point at a dead mount: bind them to the new one.
		for t, tro := range v.targets {
			if t == target {
				continue
			}
			if err := unmountAll(t); err != nil {
				d.log.Warn("rebinding a target after a daemon restart: unmount", "volume", id, "target", t, "err", err)
				continue
			}
			if err := bindMount(v.staging, t, tro); err != nil {
				d.log.Warn("rebinding a target after a daemon restart", "volume", id, "target", t, "err", err)
				delete(v.targets, t)
			}
		}
	}

	if err := os.MkdirAll(target, 0o750); err != nil {
		d.stopIfUnused(v)
		return nil, status.Errorf(codes.Internal, "volume %q: creating target %s: %v", id, target, err)
	}
	if _, mounted, _ := mountedAt(target); mounted {
		// A mount this driver does not know of (left by a plugin that
		// restarted, or an earlier daemon): replace it.
		d.log.Warn("target was already a mount point; replacing it", "volume", id, "target", target)
		if err := unmountAll(target); err != nil {
			d.stopIfUnused(v)
			return nil, status.Errorf(codes.Internal, "volume %q: target %s: %v", id, target, err)
		}
	}
	if err := bindMount(v.staging, target, ro); err != nil {
		delete(v.targets, target)
		d.stopIfUnused(v)
		return nil, status.Errorf(codes.Internal, "volume %q: %v", id, err)
	}
	v.targets[target] = ro
	v.single = single
	return &csipb.NodePublishVolumeResponse{}, nil
}

// stopIfUnused stops v's daemon when no target uses it. Called with v.mu held.
func (d *Driver) stopIfUnused(v *volume) {
	if len(v.targets) > 0 || v.d == nil {
		return
	}
	v.d.stop(d.log, v.id, d.opt.StopGrace)
	v.d = nil
	os.Remove(v.staging)
	os.Remove(filepath.Dir(v.staging))
}

// NodeUnpublishVolume unmounts req.TargetPath and removes it; the last
// unpublish of a volume on the node stops its daemon and waits for it to
// exit. A target that is not mounted or does not exist succeeds
// (idempotent, as the spec requires). Errors: InvalidArgument for a
// missing volume ID or target path; Internal when the target stays
// mounted (busy) or cannot be removed.
func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing in request")
	}
	if req.GetTargetPath() == "" {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: target path missing in request", id)
	}
	target := filepath.Clean(req.GetTargetPath())
	v, err := d.lockVolume(id)
	if err != nil {
		return nil, err
	}
	defer v.mu.Unlock()
	defer d.dropIfIdle(v)

	if err := unmountAll(target); err != nil {
		return nil, status.Errorf(codes.Internal, "volume %q: %v", id, err)
	}
	delete(v.targets, target)
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "volume %q: removing target %s: %v", id, target, err)
	}
	d.stopIfUnused(v)
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}
