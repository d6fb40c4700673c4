package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/os2g/os2g/objclient"
)

// harness holds what every trial needs.
type harness struct {
	cfg      *config
	log      *slog.Logger
	cleanups *cleanups
	workDir  string
	srcDir   string // the local copy of the data set (the "local" client's root)
	tmpDir   string
	gw       *gateway
	store    *objclient.S3
	man      *manifest
	os2gBin  string

	s3fsPasswd string
	rcloneConf string
	mountSeq   int

	writePattern []byte   // 16 MiB repeated by the write workload
	writeCRCs    []uint32 // CRC32C of each seqChunk of the written stream

	samples  []sample
	failures []string // wrong bytes and errors, for the exit status
	dropWarn bool
}

// prepareCold makes the next measurement cold: the page cache is dropped
// (so a local read comes from disk and no FUSE page survives), then the
// gateway's backing files under prefixes are read back in so that the
// server answers from memory.
func (h *harness) prepareCold(prefixes ...string) error {
	if !h.cfg.NoDropCaches {
		if err := dropCaches(); err != nil && !h.dropWarn {
			h.dropWarn = true
			h.log.Warn("cannot drop the page cache (not root?); cold figures are not cold", "err", err)
		}
	}
	if h.cfg.NoWarmServer {
		return nil
	}
	for _, p := range prefixes {
		if err := h.gw.warmServerFiles(h.cfg.Bucket, p); err != nil {
			return fmt.Errorf("warm server files %s: %w", p, err)
		}
	}
	return nil
}

// record stores s (filling run, client, case) and logs failures.
func (h *harness) record(run int, client, name string, s sample, err error) sample {
	s.Run, s.Client, s.Case = run, client, name
	if err != nil && s.Err == "" {
		s.Err = err.Error()
	}
	if s.Err != "" {
		kind := "error"
		if strings.Contains(s.Err, errWrongBytes.Error()) {
			kind = "WRONG BYTES"
		}
		msg := fmt.Sprintf("run %d %s %s: %s: %s", run, client, name, kind, s.Err)
		h.failures = append(h.failures, msg)
		progress("FAIL %s", msg)
	}
	h.samples = append(h.samples, s)
	return s
}

func nanSample(err error) sample {
	return sample{Value: math.NaN(), MiBps: math.NaN(), P50: math.NaN(), P99: math.NaN(), CPU: math.NaN(), HostCPU: math.NaN(), Err: err.Error()}
}

// mountCase mounts client fresh (caches dropped), runs fn on the mount with
// a meter started on its daemon, reads the daemon's peak RSS, runs check
// (not measured) and unmounts.
func (h *harness) mountCase(ctx context.Context, run int, rn runner, name string, ro bool, prefixes []string,
	fn func(ctx context.Context, root string, mt *meter) (sample, error),
	check func(ctx context.Context, root string) error) sample {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StepTimeout)
	defer cancel()
	client := rn.Label
	m, err := h.mount(ctx, rn, ro)
	if err != nil {
		return h.record(run, client, name, nanSample(err), nil)
	}
	defer m.undo()
	// Readers blocked in a hung mount cannot be cancelled; at the deadline
	// abort the mount so that they return.
	defer context.AfterFunc(ctx, func() { h.abort(m) })()
	if err := h.prepareCold(prefixes...); err != nil {
		return h.record(run, client, name, nanSample(err), nil)
	}
	hm := h.startHostMeter()
	mt := startMeter(m.PID, false)
	s, err := fn(ctx, m.Dir, mt)
	host := hm.seconds()
	if err != nil && s.Bytes == 0 && s.Value == 0 {
		s = nanSample(err)
	}
	s.HostCPU = host
	s.RSS = mt.rss()
	if err == nil && check != nil {
		err = check(ctx, m.Dir)
	}
	if err == nil && m.PID != 0 && findDaemonPID(m.Dir, exeHint(rn.Client)) != m.PID {
		err = fmt.Errorf("daemon %d is gone after the workload (crashed?)", m.PID)
	}
	return h.record(run, client, name, s, err)
}

// selfCase runs fn for the in-process or local-directory clients.
func (h *harness) selfCase(ctx context.Context, run int, client, name string, prefixes []string, fn func(ctx context.Context) (sample, error)) sample {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StepTimeout)
	defer cancel()
	if err := h.prepareCold(prefixes...); err != nil {
		return h.record(run, client, name, nanSample(err), nil)
	}
	hm := h.startHostMeter()
	s, err := fn(ctx)
	host := hm.seconds()
	if err != nil && s.Bytes == 0 && s.Value == 0 {
		s = nanSample(err)
	}
	s.HostCPU = host
	return h.record(run, client, name, s, err)
}

// trial runs one workload for one client in run number run and returns a
// one-line summary for the progress output.
func (h *harness) trial(ctx context.Context, run int, rn runner, workload string) string {
	client := rn.Client
	isMount := mountClients[client]
	var got []sample
	switch workload {
	case "seq":
		if client == "limit" {
			s := h.selfCase(ctx, run, client, "seq-1j", []string{seqKey}, h.limitSeq)
			got = append(got, s)
			// One measurement serves every row.
			for _, c := range []string{"seq-4j", "seq-dd"} {
				s.Case = c
				h.samples = append(h.samples, s)
			}
			break
		}
		for _, jobs := range []int{1, 4} {
			got = append(got, h.mountCase(ctx, run, rn, fmt.Sprintf("seq-%dj", jobs), true, []string{seqKey},
				func(ctx context.Context, root string, mt *meter) (sample, error) { return h.fsSeq(ctx, root, jobs, mt) },
				func(ctx context.Context, root string) error {
					return verifySeqFile(ctx, filepath.Join(root, filepath.FromSlash(seqKey)), h.man.SeqCRCs, h.man.Params.SeqSize)
				}))
		}
		got = append(got, h.mountCase(ctx, run, rn, "seq-dd", true, []string{seqKey}, h.fsDD, nil))
	case "small":
		switch {
		case client == "limit":
			got = append(got, h.selfCase(ctx, run, client, "small", []string{smallPrefix}, h.limitSmall))
		case client == "local":
			got = append(got, h.selfCase(ctx, run, client, "small", nil, func(ctx context.Context) (sample, error) {
				return h.fsSmall(ctx, h.srcDir, startMeter(0, false))
			}))
		default:
			got = append(got, h.mountCase(ctx, run, rn, "small", true, []string{smallPrefix}, h.fsSmall, nil))
		}
	case "rand":
		for _, bs := range []struct {
			name string
			fio  string
			n    int64
		}{{"rand-4k", "4k", 4 << 10}, {"rand-1m", "1M", 1 << 20}} {
			if client == "limit" {
				got = append(got, h.selfCase(ctx, run, client, bs.name, []string{seqKey}, func(ctx context.Context) (sample, error) {
					return h.limitRand(ctx, bs.n)
				}))
				continue
			}
			got = append(got, h.mountCase(ctx, run, rn, bs.name, true, []string{seqKey},
				func(ctx context.Context, root string, mt *meter) (sample, error) {
					return h.fsRand(ctx, root, bs.fio, mt)
				}, nil))
		}
	case "list":
		if client == "limit" {
			got = append(got, h.selfCase(ctx, run, client, "list", []string{listPrefix}, h.limitList))
		} else {
			got = append(got, h.mountCase(ctx, run, rn, "list", true, []string{listPrefix}, h.fsList, nil))
		}
	case "loader":
		got = append(got, h.loaderTrial(ctx, run, rn, isMount)...)
	case "loader-ddp":
		got = append(got, h.ddpTrial(ctx, run)...)
	case "write":
		key := fmt.Sprintf("%s%s-run%d.bin", writePrefix, rn.Label, run)
		if client == "limit" {
			s := h.selfCase(ctx, run, client, "write", nil, func(ctx context.Context) (sample, error) {
				s, err := h.limitWrite(ctx, key)
				if err == nil {
					err = h.verifyWritten(ctx, key)
				}
				return s, err
			})
			got = append(got, s)
			break
		}
		s := h.mountCase(ctx, run, rn, "write", false, nil,
			func(ctx context.Context, root string, mt *meter) (sample, error) {
				s, err := h.fsWrite(ctx, filepath.Join(root, filepath.FromSlash(key)), mt)
				if err != nil {
					_ = h.store.Delete(context.WithoutCancel(ctx), key)
				}
				return s, err
			},
			// close and fsync returned: the object must be complete in the bucket.
			func(ctx context.Context, _ string) error { return h.verifyWritten(ctx, key) })
		got = append(got, s)
	}
	var parts []string
	for _, s := range got {
		if s.Err != "" {
			parts = append(parts, s.Case+" FAILED")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s %s", s.Case, fmtNum(s.Value), caseUnit(s.Case)))
	}
	return strings.Join(parts, ", ")
}

// loaderTrial runs the cold and the warm epoch for one client.
func (h *harness) loaderTrial(ctx context.Context, run int, rn runner, isMount bool) []sample {
	client := rn.Label
	ctx, cancel := context.WithTimeout(ctx, h.cfg.StepTimeout)
	defer cancel()
	fail := func(err error) []sample {
		return []sample{h.record(run, client, "loader-cold", nanSample(err), nil), h.record(run, client, "loader-warm", nanSample(err), nil)}
	}
	root, pid := h.srcDir, 0
	if isMount {
		m, err := h.mount(ctx, rn, true)
		if err != nil {
			return fail(err)
		}
		defer m.undo()
		defer context.AfterFunc(ctx, func() { h.abort(m) })()
		root, pid = m.Dir, m.PID
	}
	var prefixes []string
	if isMount {
		prefixes = []string{loaderPrefix}
	}
	ss, err := h.fsLoader(ctx, root, pid, false, func() error { return h.prepareCold(prefixes...) })
	if err != nil && len(ss) < 2 {
		return fail(err)
	}
	var out []sample
	for _, s := range ss {
		out = append(out, h.record(run, client, s.Case, s, err))
	}
	return out
}

// buildOS2G returns the os2g binary to run: --os2g, else a fresh build of
// ./cmd/os2g into the work dir.
func (h *harness) buildOS2G(ctx context.Context) (string, error) {
	if h.cfg.Os2g != "" {
		return h.cfg.Os2g, nil
	}
	if _, err := os.Stat("cmd/os2g"); err != nil {
		return "", errors.New("no --os2g given and no ./cmd/os2g here to build (run from the repository root)")
	}
	out := filepath.Join(h.workDir, "os2g")
	progress("build: go build -o %s ./cmd/os2g", out)
	if b, err := runCmd(ctx, 5*time.Minute, "go", "build", "-o", out, "./cmd/os2g"); err != nil {
		return "", fmt.Errorf("go build ./cmd/os2g: %w: %s", err, lastLines(b, 10))
	}
	return out, nil
}
