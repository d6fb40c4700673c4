package objtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/os2g/os2g/objclient"
)

// Environment variables read by StartVersityServer.
const (
	// EnvEndpoint names an existing S3 endpoint to test against instead of
	// starting versitygw; credentials come from AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY.
	EnvEndpoint = "OS2G_S3_ENDPOINT"
	// EnvRequireAll set to "1" turns a skip for a missing server into a failure.
	EnvRequireAll = "OS2G_REQUIRE_ALL"
)

// SkipOrFail skips the test with the reason, or fails it when
// OS2G_REQUIRE_ALL=1 (CI, where every dependency must be present).
func SkipOrFail(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(EnvRequireAll) == "1" {
		t.Fatalf("%s (and %s=1)", reason, EnvRequireAll)
	}
	t.Skip(reason)
}

// VersityBinary returns the path of the versitygw binary (PATH, then
// $HOME/go/bin/versitygw), or "" if there is none.
func VersityBinary() string {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, "go", "bin", "versitygw")
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// StartVersityServer returns a real S3 server with a fresh, uniquely named
// bucket. With OS2G_S3_ENDPOINT set it uses that server (credentials from
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) and removes the bucket's
// objects and the bucket on t.Cleanup. Otherwise it starts a versitygw
// (posix backend in t.TempDir(), 127.0.0.1, a free port) for this test
// alone and kills it on t.Cleanup. With neither available the test is
// skipped (failed under OS2G_REQUIRE_ALL=1).
//
// versitygw maps keys to files: it cannot hold a key "a" beside "a/b", and
// it rewrites keys with "//", "." or ".." components.
func StartVersityServer(t testing.TB) *Server {
	t.Helper()
	if ep := os.Getenv(EnvEndpoint); ep != "" {
		srv := &Server{URL: ep, AccessKeyID: os.Getenv("AWS_ACCESS_KEY_ID"), SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY")}
		srv.Bucket = createBucket(t, srv, true)
		return srv
	}
	bin := VersityBinary()
	if bin == "" {
		SkipOrFail(t, "objtest: versitygw not found on PATH or in $HOME/go/bin and "+EnvEndpoint+" unset")
	}
	srv := &Server{AccessKeyID: TestAccessKey, SecretAccessKey: TestSecretKey}
	startVersity(t, bin, srv)
	srv.Bucket = createBucket(t, srv, false)
	return srv
}

// StartVersity starts (or reuses, see StartVersityServer) a real S3 server
// with a fresh bucket and returns an objclient store on it.
func StartVersity(t testing.TB) *objclient.S3 {
	t.Helper()
	return NewS3(t, StartVersityServer(t).Options())
}

// FreePort returns a TCP address "127.0.0.1:PORT" on which nothing
// listened a moment ago.
func FreePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("objtest: find a free port: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func startVersity(t testing.TB, bin string, srv *Server) {
	t.Helper()
	dir := t.TempDir()
	var out bytes.Buffer
	// Up to three tries in case another process takes the free port first.
	for try := 0; try < 3; try++ {
		addr := FreePort(t)
		cmd := exec.Command(bin, "--access", srv.AccessKeyID, "--secret", srv.SecretAccessKey,
			"--port", addr, "--keep-alive", "--quiet", "posix", dir)
		out.Reset()
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("objtest: start versitygw: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-exited
		}
		url := "http://" + addr
		if err := waitHTTP(url, exited); err != nil {
			stop()
			t.Logf("objtest: versitygw on %s did not come up (%v): %s", addr, err, out.String())
			continue
		}
		// Registered after t.TempDir, so it runs before the directory is removed.
		t.Cleanup(stop)
		srv.URL = url
		return
	}
	t.Fatalf("objtest: versitygw did not start; last output: %s", out.String())
}

// waitHTTP polls url until any HTTP answer comes back, the process exits,
// or a 15 s hang guard passes.
func waitHTTP(url string, exited <-chan error) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("versitygw exited: %v", err)
		default:
		}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func uniqueBucket() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "os2g-test-" + hex.EncodeToString(b[:])
}

// createBucket creates a fresh bucket on srv; with cleanup it also empties
// and removes it when the test ends.
func createBucket(t testing.TB, srv *Server, cleanup bool) string {
	t.Helper()
	c := rawClient(srv.URL, srv.AccessKeyID, srv.SecretAccessKey)
	name := uniqueBucket()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("objtest: create bucket %q on %s: %v", name, srv.URL, err)
	}
	if cleanup {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := removeBucket(ctx, c, name); err != nil {
				t.Logf("objtest: remove bucket %q: %v", name, err)
			}
		})
	}
	return name
}

func removeBucket(ctx context.Context, c *s3.Client, name string) error {
	ups, err := c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(name)})
	if err == nil {
		for _, u := range ups.Uploads {
			_, _ = c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(name), Key: u.Key, UploadId: u.UploadId})
		}
	}
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(name)})
	var errs []error
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		if len(page.Contents) == 0 {
			continue
		}
		ids := make([]types.ObjectIdentifier, 0, len(page.Contents))
		for _, o := range page.Contents {
			ids = append(ids, types.ObjectIdentifier{Key: o.Key})
		}
		if _, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(name), Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}}); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(name)}); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
