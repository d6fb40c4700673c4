package objclient_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

// BenchmarkStatEmpty measures what readdir spends on a prefix of
// OS2G_BENCH_EMPTY (default 2,000) zero-byte objects on versitygw: one
// Stat each, 32 at a time (fusefs/readdir.go's zeroChecks), through the
// raw HEAD and through the SDK's HeadObject, against the raw SDK
// ListObjectsV2 of the prefix (issue 14 item 5). Reported per pass:
// list-ns, raw-ns and sdk-ns (the HEADs alone), and the ratios
// (list+HEADs)/list for both paths.
func BenchmarkStatEmpty(b *testing.B) {
	n := 2000
	if v := os.Getenv("OS2G_BENCH_EMPTY"); v != "" {
		fmt.Sscan(v, &n)
	}
	srv := objtest.StartVersityServer(b)
	raw := objtest.NewS3(b, srv.Options())
	o := srv.Options()
	objclient.WithSDKHead(&o)
	sdk := objtest.NewS3(b, o)
	keys := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range keys {
		keys[i] = fmt.Sprintf("e/f%06d", i)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			objtest.PutRaw(b, raw, keys[i], nil, "", nil)
		}()
	}
	wg.Wait()
	ctx := b.Context()
	list := func() {
		p := s3.NewListObjectsV2Paginator(raw.Client(), &s3.ListObjectsV2Input{Bucket: aws.String(srv.Bucket), Prefix: aws.String("e/"), Delimiter: aws.String("/")})
		count := 0
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				b.Fatal(err)
			}
			count += len(out.Contents)
		}
		if count != n {
			b.Fatalf("LIST: %d objects, want %d", count, n)
		}
	}
	stats := func(s *objclient.S3) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 32)
		for _, k := range keys {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if oi, err := s.Stat(ctx, k); err != nil || oi.Size != 0 {
					b.Errorf("Stat %s: %+v, %v", k, oi, err)
				}
			}()
		}
		wg.Wait()
	}
	var tl, tr, ts time.Duration
	var cr, cs time.Duration     // client CPU (user+system) of the HEADs
	var vl, vr, vs time.Duration // server (child process) CPU of LIST and HEADs
	b.ResetTimer()
	for range b.N {
		start, v0 := time.Now(), childCPU()
		list()
		tl += time.Since(start)
		vl += childCPU() - v0
		start, c0, v0 := time.Now(), cpuTime(b), childCPU()
		stats(raw)
		tr += time.Since(start)
		cr += cpuTime(b) - c0
		vr += childCPU() - v0
		start, c0, v0 = time.Now(), cpuTime(b), childCPU()
		stats(sdk)
		ts += time.Since(start)
		cs += cpuTime(b) - c0
		vs += childCPU() - v0
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(per(tl), "list-ns")
	b.ReportMetric(per(tr), "raw-ns")
	b.ReportMetric(per(ts), "sdk-ns")
	b.ReportMetric(float64(cr.Microseconds())/float64(b.N*n), "raw-cpu-us/HEAD")
	b.ReportMetric(float64(cs.Microseconds())/float64(b.N*n), "sdk-cpu-us/HEAD")
	b.ReportMetric(float64(vl.Microseconds())/float64(b.N*n), "srv-list-cpu-us/obj")
	b.ReportMetric(float64(vr.Microseconds())/float64(b.N*n), "srv-raw-cpu-us/HEAD")
	b.ReportMetric(float64(vs.Microseconds())/float64(b.N*n), "srv-sdk-cpu-us/HEAD")
	b.ReportMetric(float64(tl+tr)/float64(tl), "raw-ratio")
	b.ReportMetric(float64(tl+ts)/float64(tl), "sdk-ratio")
}

// cpuTime is the user+system CPU time of this process so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childCPU is the user+system CPU time of this process's running children
// (the versitygw server), from /proc; 0 where /proc cannot tell.
func childCPU() time.Duration {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	var total time.Duration
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, pid := range strings.Fields(string(b)) {
			st, err := os.ReadFile("/proc/" + pid + "/stat")
			if err != nil {
				continue
			}
			s := string(st)
			fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
			if len(fields) < 13 {
				continue
			}
			var u, k int64
			fmt.Sscan(fields[11], &u)
			fmt.Sscan(fields[12], &k)
			total += time.Duration(u+k) * 10 * time.Millisecond // USER_HZ = 100
		}
	}
	return total
}
