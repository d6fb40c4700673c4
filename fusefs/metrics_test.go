package fusefs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/os2g/os2g/objclient/objtest"
)

// TestOpMetrics: a mount with a Registerer counts each answered request by
// operation and result, and times it.
func TestOpMetrics(t *testing.T) {
	st := objtest.NewMem()
	seed(t, st, obj{key: "d/a.txt", data: []byte("hello")})
	reg := prometheus.NewRegistry()
	mnt := testMount(t, st, Options{Registerer: reg})

	if b, err := os.ReadFile(filepath.Join(mnt, "d", "a.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("read: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "missing")); !os.IsNotExist(err) {
		t.Fatalf("stat of a missing name: %v", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "d", "w.txt"), []byte("written"), 0o644); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := syscall.Rmdir(filepath.Join(mnt, "d")); err != syscall.ENOTEMPTY {
		t.Fatalf("rmdir of a non-empty directory: %v, want ENOTEMPTY", err)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &sfs); err != nil {
		t.Fatal(err)
	}

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	ops := map[[2]string]float64{}
	hist := map[string]uint64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var op, status string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "op":
					op = l.GetValue()
				case "status":
					status = l.GetValue()
				}
			}
			switch f.GetName() {
			case "os2g_fuse_ops_total":
				ops[[2]string{op, status}] = m.GetCounter().GetValue()
			case "os2g_fuse_op_duration_seconds":
				hist[op] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	for _, k := range [][2]string{{"lookup", "ok"}, {"rmdir", "ENOTEMPTY"}, {"open", "ok"}, {"read", "ok"}, {"create", "ok"}, {"write", "ok"}, {"flush", "ok"}, {"statfs", "ok"}} {
		if ops[k] < 1 {
			t.Errorf("os2g_fuse_ops_total{op=%q,status=%q} = %v, want at least 1 (all: %v)", k[0], k[1], ops[k], ops)
		}
	}
	for _, op := range []string{"lookup", "read", "write", "flush"} {
		var n float64
		for k, v := range ops {
			if k[0] == op {
				n += v
			}
		}
		if float64(hist[op]) != n {
			t.Errorf("%s: %d timed, %v counted", op, hist[op], n)
		}
	}
	if statusName(0) != "ok" || statusName(5) != "EIO" || statusName(200) != "errno200" {
		t.Errorf("statusName: %q %q %q", statusName(0), statusName(5), statusName(200))
	}
}
