package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/os2g/os2g/objclient"
)

// gateway is the S3 server the benchmark runs against: a versitygw this
// process started on loopback, or an external endpoint.
type gateway struct {
	Endpoint string // http://127.0.0.1:PORT
	// Root is the posix backend's top directory (buckets are its
	// subdirectories); "" for an external endpoint.
	Root string
	pid  int
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startGateway starts versitygw (posix backend rooted at root) on a free
// loopback port and waits until it accepts connections. The returned stop
// function terminates it.
func startGateway(ctx context.Context, c *config, root, logPath string, log *slog.Logger) (*gateway, func(context.Context) error, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// Fenced on its own CPUs, a stand-in for a remote store (placement.go).
	name, args := fencedCommand(c.ServerCPUs, c.Versitygw, "--access", c.AccessKey, "--secret", c.SecretKey,
		"--port", addr, "--keep-alive", "--quiet", "posix", root)
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// Own process group: a Ctrl-C meant for the harness must not kill the
	// gateway before the mounts on top of it are gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, nil, fmt.Errorf("start versitygw: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); lf.Close() }()
	stop := func(ctx context.Context) error {
		select {
		case <-exited:
			return nil
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			return nil
		case <-time.After(3 * time.Second):
			// It waits for client connections to drain; nothing is
			// being written any more, so do not wait.
			_ = cmd.Process.Kill()
			<-exited
			return nil
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			break
		}
		select {
		case err := <-exited:
			exited <- err
			return nil, nil, fmt.Errorf("versitygw exited during start (%v); see %s", err, logPath)
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			_ = stop(context.Background())
			return nil, nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			_ = stop(context.Background())
			return nil, nil, fmt.Errorf("versitygw did not listen on %s within 30s; see %s", addr, logPath)
		}
	}
	log.Debug("versitygw started", "pid", cmd.Process.Pid, "addr", addr, "root", root)
	return &gateway{Endpoint: "http://" + addr, Root: root, pid: cmd.Process.Pid}, stop, nil
}

// newStore builds the SDK store used for uploads, checks and the limit
// client.
func newStore(ctx context.Context, c *config, endpoint string, log *slog.Logger) (*objclient.S3, error) {
	return objclient.New(ctx, objclient.Options{
		Bucket:          c.Bucket,
		Region:          "us-east-1",
		Endpoint:        endpoint,
		ForcePathStyle:  true,
		AccessKeyID:     c.AccessKey,
		SecretAccessKey: c.SecretKey,
		PartSize:        8 << 20,
		// No per-request CRC of payloads: the harness checks bytes itself,
		// and the SDK logs a line for every response without a checksum.
		ChecksumWhenRequired: true,
		Logger:               log,
	})
}

// ensureBucket creates the bucket unless it exists.
func ensureBucket(ctx context.Context, st *objclient.S3) error {
	_, err := st.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(st.Bucket())})
	var ae smithy.APIError
	if err != nil && errors.As(err, &ae) && (ae.ErrorCode() == "BucketAlreadyOwnedByYou" || ae.ErrorCode() == "BucketAlreadyExists") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", st.Bucket(), err)
	}
	return nil
}

// warmServerFiles reads every file under the gateway's backing directory
// for key prefix into the page cache, so that after drop_caches the
// server answers from memory and the figures measure the clients, not the
// disk. No-op for an external endpoint.
func (g *gateway) warmServerFiles(bucket, prefix string) error {
	if g.Root == "" {
		return nil
	}
	dir := filepath.Join(g.Root, bucket, filepath.FromSlash(prefix))
	buf := make([]byte, 1<<20)
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		for {
			_, err := f.Read(buf)
			if err != nil {
				return nil
			}
		}
	})
}
