package csi

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// statfsTimeout bounds a statfs of a published target: a daemon that hangs
// must not hang the kubelet's stats calls.
const statfsTimeout = 10 * time.Second

// NodeGetVolumeStats reports the file system statistics of a published
// target: what the os2g daemon answers to statfs, in bytes and inodes.
// Errors: InvalidArgument without a volume ID or path; NotFound when the
// volume is not published on this node, or not at that path; Unavailable,
// naming the volume and the reason, when its daemon has exited (the next
// publish of the volume on this node restarts it) or the target does not
// answer statfs within 10 s.
func (d *Driver) NodeGetVolumeStats(ctx context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing in request")
	}
	if req.GetVolumePath() == "" {
		return nil, status.Errorf(codes.InvalidArgument, "volume %q: volume path missing in request", id)
	}
	path := filepath.Clean(req.GetVolumePath())

	d.mu.Lock()
	v := d.vols[id]
	d.mu.Unlock()
	if v == nil {
		return nil, status.Errorf(codes.NotFound, "volume %q is not published on this node", id)
	}
	v.mu.Lock()
	_, here := v.targets[path]
	dm := v.d
	removed := v.removed
	v.mu.Unlock()
	if removed || !here {
		return nil, status.Errorf(codes.NotFound, "volume %q is not published at %s", id, path)
	}

	if dm == nil || !dm.alive() {
		msg := "has no os2g daemon"
		if dm != nil {
			msg = fmt.Sprintf("lost its os2g daemon (%v; last output: %q)", dm.waitErr, dm.tail.message())
		}
		return nil, status.Errorf(codes.Unavailable, "volume %q %s; the next publish of the volume on this node restarts it", id, msg)
	}
	type result struct {
		st  syscall.Statfs_t
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.err = syscall.Statfs(path, &r.st)
		done <- r
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(statfsTimeout):
		return nil, status.Errorf(codes.Unavailable, "volume %q: statfs of %s did not answer within %v", id, path, statfsTimeout)
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if r.err != nil {
		return nil, status.Errorf(codes.Unavailable, "volume %q: statfs of %s: %v", id, path, r.err)
	}
	bs := int64(r.st.Bsize)
	resp := &csipb.NodeGetVolumeStatsResponse{}
	resp.Usage = []*csipb.VolumeUsage{
		{
			Unit:      csipb.VolumeUsage_BYTES,
			Total:     int64(r.st.Blocks) * bs,
			Available: int64(r.st.Bavail) * bs,
			Used:      int64(sub(r.st.Blocks, r.st.Bfree)) * bs,
		},
		{
			Unit:      csipb.VolumeUsage_INODES,
			Total:     int64(r.st.Files),
			Available: int64(r.st.Ffree),
			Used:      int64(sub(r.st.Files, r.st.Ffree)),
		},
	}
	return resp, nil
}

// sub is a-b, or 0 when b > a.
func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
