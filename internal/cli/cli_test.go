package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"4096", 4096},
		{"512MiB", 512 << 20},
		{"2GiB", 2 << 30},
		{"2gib", 2 << 30},
		{"8M", 8 << 20},
		{"8m", 8 << 20},
		{"1K", 1024},
		{"1.5GiB", 3 << 29},
		{"100MB", 100_000_000},
		{"1kb", 1000},
		{"1T", 1 << 40},
		{"10B", 10},
		{" 64 MiB ", 64 << 20},
	}
	for _, tc := range tests {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "abc", "-1", "-1MiB", "1XB", "MiB", "1e400", "9999999999999T", "NaN"} {
		if got, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) = %d, nil; want an error", bad, got)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 3 << 29: "1.5 GiB", 5 << 40: "5.0 TiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestModeFlag(t *testing.T) {
	var m modeFlag
	for in, want := range map[string]os.FileMode{"0644": 0o644, "755": 0o755, "0o600": 0o600, "0": 0} {
		if err := m.Set(in); err != nil || m.v != want {
			t.Errorf("Set(%q) -> %o, %v; want %o", in, m.v, err, want)
		}
	}
	for _, bad := range []string{"", "999", "0x1ff", "17777", "rw-r--r--"} {
		if err := m.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}

func TestParseS3URL(t *testing.T) {
	tests := []struct {
		in     string
		bucket string
		prefix string
	}{
		{"s3://bucket", "bucket", ""},
		{"s3://bucket/", "bucket", ""},
		{"s3://bucket/prefix", "bucket", "prefix/"},
		{"s3://bucket/prefix/", "bucket", "prefix/"},
		{"s3://bucket/a/b", "bucket", "a/b/"},
	}
	for _, tc := range tests {
		u, err := ParseS3URL(tc.in)
		if err != nil || u.Bucket != tc.bucket || u.Prefix != tc.prefix {
			t.Errorf("ParseS3URL(%q) = %+v, %v; want bucket %q prefix %q", tc.in, u, err, tc.bucket, tc.prefix)
		}
	}
	for _, bad := range []string{"bucket", "s3:/bucket", "s3://", "s3:///x", "http://bucket/x", "/mnt/x", "s3://b b/x"} {
		if u, err := ParseS3URL(bad); err == nil {
			t.Errorf("ParseS3URL(%q) = %+v, nil; want an error", bad, u)
		}
	}
	if got := (S3URL{Bucket: "b", Prefix: "p/"}).String(); got != "s3://b/p/" {
		t.Errorf("String() = %q", got)
	}
}

func TestParseInterspersed(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	ro := fs.Bool("read-only", false, "")
	uid := fs.Int("uid", 0, "")
	err := fs.Parse([]string{"s3://b", "--read-only", "/mnt", "--uid", "7", "--", "--not-a-flag"})
	if err != nil {
		t.Fatal(err)
	}
	pos := fs.Args()
	if !*ro || *uid != 7 {
		t.Errorf("flags: read-only %v uid %d", *ro, *uid)
	}
	if want := []string{"s3://b", "/mnt", "--not-a-flag"}; fmt.Sprint(pos) != fmt.Sprint(want) {
		t.Errorf("positional = %q, want %q", pos, want)
	}
}

func runMain(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = Main(context.Background(), Env{Args: args, Stdout: &o, Stderr: &e, Getenv: func(k string) string { return env[k] }, Version: "v-test"})
	return code, o.String(), e.String()
}

func TestMainUsage(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{nil, 2, "", "Usage:"},
		{[]string{"version"}, 0, "os2g v-test", ""},
		{[]string{"help"}, 0, "os2g mount", ""},
		{[]string{"help", "mount"}, 0, "-max-memory", ""},
		{[]string{"mount", "--help"}, 0, "-endpoint-url", ""},
		{[]string{"upload", "-h"}, 0, "-concurrency", ""},
		{[]string{"umount", "--help"}, 0, "fusermount3 -u", ""},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"mount", "s3://b"}, 2, "", "os2g: mount: want 2 arguments"},
		{[]string{"mount", "--bogus", "s3://b", "/mnt"}, 2, "", "unknown flag: --bogus"},
		{[]string{"mount", "bucket", "/mnt"}, 2, "", "not an s3:// URL"},
		{[]string{"mount", "--max-memory", "lots", "s3://b", "/mnt"}, 2, "", "invalid size"},
		{[]string{"mount", "--file-mode", "999", "s3://b", "/mnt"}, 2, "", "invalid mode"},
		{[]string{"mount", "--endpoint-url", "127.0.0.1:9", "--foreground", "s3://b", t.TempDir()}, 2, "", "not an http:// or https:// URL"},
		{[]string{"mount", "--cpus", "2-x", "s3://b", "/mnt"}, 2, "", `invalid argument "2-x" for "--cpus" flag: bad CPU list`},
		{[]string{"mount", "--cpus", "", "s3://b", "/mnt"}, 2, "", `invalid argument "" for "--cpus" flag: bad CPU list`},
		{[]string{"mount", "--cpus", "3-1", "s3://b", "/mnt"}, 2, "", "runs backwards"},
		{[]string{"mount", "--cpus", "1023", "s3://b", "/mnt"}, 2, "", `for "--cpus" flag: CPU 1023 not online`},
		{[]string{"upload", "/tmp"}, 2, "", "want 2 arguments"},
		{[]string{"upload", "--concurrency", "0", "/tmp", "s3://b"}, 2, "", "--concurrency"},
		{[]string{"umount"}, 2, "", "want 1 argument"},
	}
	for _, tc := range tests {
		code, out, errOut := runMain(t, nil, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.inStdout) || !strings.Contains(errOut, tc.inStderr) {
			t.Errorf("os2g %q: exit %d (want %d)\nstdout: %s\nstderr: %s", tc.args, code, tc.code, out, errOut)
		}
	}
}

func TestMountpointChecks(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path     string
		nonempty bool
		wantErr  string
	}{
		{filepath.Join(dir, "missing"), false, "does not exist (create it with: mkdir -p"},
		{file, false, "is not a directory"},
		{dir, false, "is not empty"},
		{dir, true, ""},
		{empty, false, ""},
	}
	for _, tc := range tests {
		got, err := checkMountpoint(tc.path, tc.nonempty)
		if tc.wantErr == "" {
			if err != nil || got != tc.path {
				t.Errorf("checkMountpoint(%s) = %q, %v; want ok", tc.path, got, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("checkMountpoint(%s) error = %v; want %q", tc.path, err, tc.wantErr)
		}
	}
	// A relative path comes back absolute.
	t.Chdir(dir)
	if got, err := checkMountpoint("empty", false); err != nil || got != empty {
		t.Errorf("relative: %q, %v", got, err)
	}
}

func TestMemoryLimit(t *testing.T) {
	write := func(root, rel, content string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	meminfo := "MemTotal:       16384000 kB\nMemFree:  1 kB\n"
	ram := int64(16384000) << 10

	// cgroup v2 with a limit on the process's own group.
	v2 := t.TempDir()
	write(v2, "proc/meminfo", meminfo)
	write(v2, "proc/self/cgroup", "0::/job/a\n")
	write(v2, "sys/fs/cgroup/job/a/memory.max", "4294967296\n")
	write(v2, "sys/fs/cgroup/job/memory.max", "max\n")
	if got, err := memoryLimit(v2); err != nil || got != 4<<30 {
		t.Errorf("v2: %d, %v; want %d", got, err, int64(4<<30))
	}
	// cgroup v2, limit on the parent only.
	write(v2, "sys/fs/cgroup/job/a/memory.max", "max\n")
	write(v2, "sys/fs/cgroup/job/memory.max", "2147483648\n")
	if got, _ := memoryLimit(v2); got != 2<<30 {
		t.Errorf("v2 parent: %d; want %d", got, int64(2<<30))
	}
	// cgroup v1 without a limit (huge number): RAM wins.
	v1 := t.TempDir()
	write(v1, "proc/meminfo", meminfo)
	write(v1, "proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/x\n")
	write(v1, "sys/fs/cgroup/memory/x/memory.limit_in_bytes", "9223372036854771712\n")
	if got, err := memoryLimit(v1); err != nil || got != ram {
		t.Errorf("v1 unlimited: %d, %v; want %d", got, err, ram)
	}
	// cgroup v1 with a limit in the namespace root (container view).
	write(v1, "sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824\n")
	if got, _ := memoryLimit(v1); got != 1<<30 {
		t.Errorf("v1 limited: %d; want %d", got, int64(1<<30))
	}
	// A limit above RAM does not raise it.
	write(v1, "sys/fs/cgroup/memory/memory.limit_in_bytes", fmt.Sprint(ram*2))
	if got, _ := memoryLimit(v1); got != ram {
		t.Errorf("v1 limit above RAM: %d; want %d", got, ram)
	}
	// The real machine gives something positive.
	if got, err := defaultMaxMemory(); err != nil || got <= 0 {
		t.Errorf("defaultMaxMemory() = %d, %v", got, err)
	}
}

func TestDescribeStoreErr(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", objclient.ErrNoSuchBucket), `bucket "b" does not exist at http://h:1`},
		{fmt.Errorf("x: %w", objclient.ErrInvalidCredentials), `rejected the credentials for bucket "b"`},
		{fmt.Errorf("x: %w", objclient.ErrAccessDenied), `access to bucket "b" denied`},
		{fmt.Errorf("x: %w", objclient.ErrUnavailable), "cannot reach the object store at http://h:1"},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), "cannot reach the object store at http://h:1: no answer in time"},
		{errors.New("odd\nerror"), `checking bucket "b" at http://h:1: odd error`},
	}
	for _, tc := range tests {
		got := describeStoreErr(tc.err, "b", "http://h:1")
		if !strings.Contains(got, tc.want) || strings.Contains(got, "\n") {
			t.Errorf("describeStoreErr(%v) = %q; want it to contain %q on one line", tc.err, got, tc.want)
		}
	}
	if got := describeStoreErr(objclient.ErrNoSuchBucket, "b", ""); !strings.Contains(got, "AWS S3") {
		t.Errorf("no endpoint: %q", got)
	}
}

func TestConnOptionsPathStyle(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
		want bool
	}{
		{nil, nil, false},
		{[]string{"--endpoint-url", "http://127.0.0.1:7070"}, nil, true},
		{nil, map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:7070"}, true},
		{[]string{"--endpoint-url", "http://127.0.0.1:7070", "--force-path-style=false"}, nil, false},
		{[]string{"--force-path-style"}, nil, true},
	}
	for _, tc := range tests {
		var c connFlags
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		c.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		o, err := c.options(Env{Getenv: func(k string) string { return tc.env[k] }}, "b", nil)
		if err != nil || o.ForcePathStyle != tc.want || o.Bucket != "b" {
			t.Errorf("%q %v: ForcePathStyle %v, err %v; want %v", tc.args, tc.env, o.ForcePathStyle, err, tc.want)
		}
	}
}

func TestUpload(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"train/cat/1.png": "one",
		"train/dog/2.png": "two two",
		"top.txt":         "",
	}
	for rel, data := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("top.txt", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	var skipped []string
	list, err := collectUploads(dir, "data/", func(p string, _ os.FileMode) { skipped = append(skipped, p) })
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 || len(skipped) != 1 || skipped[0] != filepath.Join(dir, "link") {
		t.Fatalf("collect: %+v, skipped %q", list, skipped)
	}
	store := objtest.NewMem()
	var prog uploadProgress
	if err := uploadAll(context.Background(), store, list, 2, 0, &prog); err != nil {
		t.Fatal(err)
	}
	if prog.files.Load() != 3 || prog.bytes.Load() != 10 {
		t.Errorf("progress: %d files %d bytes; want 3, 10", prog.files.Load(), prog.bytes.Load())
	}
	if got, want := fmt.Sprint(store.Keys()), "[data/top.txt data/train/cat/1.png data/train/dog/2.png]"; got != want {
		t.Errorf("keys %s, want %s", got, want)
	}
	for rel, data := range files {
		got, ok := store.Data("data/" + rel)
		if !ok || string(got) != data {
			t.Errorf("%s: %q, %v; want %q", rel, got, ok, data)
		}
	}
	if _, err := collectUploads(filepath.Join(dir, "top.txt"), "", nil); err == nil {
		t.Error("collectUploads of a file: no error")
	}
}

func TestUploadStopsAtFirstError(t *testing.T) {
	dir := t.TempDir()
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	list, err := collectUploads(dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	list[3].path = filepath.Join(dir, "vanished")
	var prog uploadProgress
	err = uploadAll(context.Background(), objtest.NewMem(), list, 1, 0, &prog)
	if err == nil || !strings.Contains(err.Error(), "vanished") || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v; want the missing file's error", err)
	}
	if n := prog.files.Load(); n != 3 {
		t.Errorf("uploaded %d files before stopping; want 3 (concurrency 1)", n)
	}
}

// TestMainConventions: the CLI conventions of issue 16 (help of help,
// version and commit, completion, typo suggestions, short flags, grouped
// help) and usage errors that name the flag or argument (issue 14 item 7).
func TestMainConventions(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		inStdout []string
		inStderr []string
	}{
		{[]string{"help", "--help"}, 0, []string{"os2g help [command]"}, nil},
		{[]string{"help", "help"}, 0, []string{"os2g help [command]"}, nil},
		{[]string{"--version"}, 0, []string{"os2g v-test (commit 0123456789ab)"}, nil},
		{[]string{"version"}, 0, []string{"os2g v-test (commit 0123456789ab)"}, nil},
		{[]string{"completion", "bash"}, 0, []string{"bash completion", "__start_os2g"}, nil},
		{[]string{"completion", "zsh"}, 0, []string{"#compdef os2g"}, nil},
		{[]string{"completion", "fish"}, 0, []string{"complete -c os2g"}, nil},
		{[]string{"mont", "s3://b", "/mnt"}, 2, nil, []string{`unknown command "mont"`, `did you mean "mount"?`}},
		{[]string{"mount", "--endpiont-url", "x", "s3://b", "/mnt"}, 2, nil, []string{"unknown flag: --endpiont-url", "did you mean --endpoint-url?"}},
		{[]string{"mount", "--help"}, 0, []string{"Source flags:", "Caching flags:", "Memory flags:", "Writes flags:", "Logging and metrics flags:", "GPU direct placement flags:", "-f, --foreground", "-d, --debug", "--metadata-ttl ttl"}, nil},
		{[]string{"mount", "--metadata-ttl", "soon", "s3://b", "/mnt"}, 2, nil, []string{`"--metadata-ttl"`, `invalid TTL "soon"`}},
		{[]string{"mount", "--negative-ttl", "-5", "s3://b", "/mnt"}, 2, nil, []string{`"--negative-ttl"`, "negative"}},
		{[]string{"mount", "--cache-dir", "/tmp/x", "--cache-size", "0", "s3://b", "/mnt"}, 2, nil, []string{"os2g: mount: --cache-size must be positive"}},
		{[]string{"mount", "--max-memory", "0", "s3://b", "/mnt"}, 2, nil, []string{"os2g: mount: --max-memory must be positive"}},
		{[]string{"mount", "--part-size", "1", "s3://data/x", "/mnt"}, 2, nil, []string{"os2g: mount: --part-size"}},
		{[]string{"upload", "--part-size", "1", "/tmp", "s3://data/x"}, 2, nil, []string{"os2g: upload: --part-size"}},
		{[]string{"mount", "s3://data//x", "/mnt"}, 2, nil, []string{`os2g: mount: "s3://data//x" has an empty path component`}},
		{[]string{"upload", "/tmp", "s3://data/a/../b"}, 2, nil, []string{`".." path component`}},
		{[]string{"mount", "--uid", "x", "s3://b", "/mnt"}, 2, nil, []string{`"--uid"`}},
		{[]string{"mount", "-f", "--gdd-socket", "/tmp/s", "--gdd-device", "tpu", "s3://b", "/mnt"}, 2, nil, []string{"--gdd-device"}},
		{[]string{"warm", "--concurrency", "0", "/tmp"}, 2, nil, []string{"--concurrency"}},
		{[]string{"stats"}, 2, nil, []string{"want 1 argument, MOUNTPOINT"}},
		{[]string{"version", "extra"}, 2, nil, []string{"takes no arguments"}},
	}
	for _, tc := range tests {
		var o, e bytes.Buffer
		code := Main(context.Background(), Env{Args: tc.args, Stdout: &o, Stderr: &e, Version: "v-test", Commit: "0123456789abcdef"})
		ok := code == tc.code
		for _, w := range tc.inStdout {
			ok = ok && strings.Contains(o.String(), w)
		}
		for _, w := range tc.inStderr {
			ok = ok && strings.Contains(e.String(), w)
		}
		if !ok {
			t.Errorf("os2g %q: exit %d (want %d)\nstdout: %s\nstderr: %s", tc.args, code, tc.code, o.String(), e.String())
		}
	}
}

// TestMountFlagsParse: short flags and the TTL forms reach mountFlags.
func TestMountFlagsParse(t *testing.T) {
	tests := []struct {
		args []string
		ttl  time.Duration
		fg   bool
		dbg  bool
	}{
		{[]string{"-f", "-d"}, time.Minute, true, true},
		{[]string{"-fd", "--metadata-ttl", "30"}, 30 * time.Second, true, true},
		{[]string{"--metadata-ttl=90s"}, 90 * time.Second, false, false},
		{[]string{"--metadata-ttl", "indefinite"}, TTLIndefinite, false, false},
		{[]string{"--metadata-ttl", "minimal"}, time.Second, false, false},
		{[]string{"--metadata-ttl", "0.5"}, 500 * time.Millisecond, false, false},
		{[]string{"--metadata-ttl", "0"}, 0, false, false},
	}
	for _, tc := range tests {
		var m mountFlags
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		m.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if m.metadataTTL.v != tc.ttl || m.foreground != tc.fg || m.debug != tc.dbg {
			t.Errorf("%q: ttl %v foreground %v debug %v; want %v %v %v", tc.args, m.metadataTTL.v, m.foreground, m.debug, tc.ttl, tc.fg, tc.dbg)
		}
	}
	if got := nonzeroTTL(0); got != time.Nanosecond {
		t.Errorf("nonzeroTTL(0) = %v", got)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"abc", "abc", 0}, {"endpiont-url", "endpoint-url", 2}, {"readonly", "read-only", 1}, {"", "ab", 2}, {"kitten", "sitting", 3}} {
		if got := editDistance(tc.a, tc.b); got != tc.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
}

// TestHelperArgs: mount helper command lines (mount.fuse3's and mount(8)'s
// /sbin/mount.fuse.os2g calling conventions) become os2g mount arguments.
func TestHelperArgs(t *testing.T) {
	tests := []struct {
		args []string
		want string // the mount arguments, space-separated
		fake bool
		err  string
	}{
		{[]string{"s3://b/p", "/mnt/d", "-o", "rw,noexec,nosuid,nodev,endpoint-url=http://127.0.0.1:7070,allow_other"},
			"--endpoint-url=http://127.0.0.1:7070 --allow-other -- s3://b/p /mnt/d", false, ""},
		{[]string{"s3://b", "/mnt/d", "-o", "ro,_netdev,nofail,defaults,x-systemd.automount,max_memory=2GiB,comment=\"a,b\"", "-t", "fuse.os2g", "-n"},
			"--read-only --max-memory=2GiB -- s3://b /mnt/d", false, ""},
		{[]string{"s3://b", "/mnt/d", "-oread-only,immutable", "-o", "metadata_ttl=indefinite"},
			"--read-only --immutable --metadata-ttl=indefinite -- s3://b /mnt/d", false, ""},
		{[]string{"s3://b", "/mnt/d", "-f", "-o", "ro"}, "--read-only -- s3://b /mnt/d", true, ""},
		{[]string{"s3://b", "/mnt/d", "-o", "endpont-url=x"}, "", false, "-o endpont-url: unknown option (did you mean endpoint-url?)"},
		{[]string{"s3://b", "/mnt/d", "-t", "nfs"}, "", false, "-t nfs"},
		{[]string{"s3://b", "-o", "ro"}, "", false, "want 2 arguments"},
		{[]string{"s3://b", "/mnt/d", "-o"}, "", false, "-o needs a value"},
	}
	for _, tc := range tests {
		var m mountFlags
		fs := pflag.NewFlagSet("mount", pflag.ContinueOnError)
		m.register(fs)
		got, fake, err := helperArgs(tc.args, fs)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, errUsage) {
				t.Errorf("%q: err %v, want a usage error with %q", tc.args, err, tc.err)
			}
		case err != nil || strings.Join(got, " ") != tc.want || fake != tc.fake:
			t.Errorf("%q: %q fake %v err %v; want %q fake %v", tc.args, got, fake, err, tc.want, tc.fake)
		}
	}
	// Through Main: a helper call with an unknown option exits 2.
	code, _, errOut := runMain(t, nil, "s3://b", "/mnt/d", "-o", "bogus")
	if code != 2 || !strings.Contains(errOut, "os2g: mount: -o bogus: unknown option") {
		t.Errorf("helper call with -o bogus: exit %d, stderr %q", code, errOut)
	}
	// A helper call reaches mount's own checks (the bad URL is one).
	code, _, errOut = runMain(t, nil, "s3://data//x", "/mnt/d", "-o", "ro")
	if code != 2 || !strings.Contains(errOut, "empty path component") {
		t.Errorf("helper call with s3://data//x: exit %d, stderr %q", code, errOut)
	}
}

// TestUploadSkipsUnchanged: a rerun skips the files the store holds with
// the same size and a time not older than the file's (aws s3 sync's rule),
// and uploads the ones that changed in size or were modified since.
func TestUploadSkipsUnchanged(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"same.txt": "same", "grown.txt": "v1", "touched.txt": "t", "new.txt": ""} {
		if name == "new.txt" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	store := objtest.NewMem()
	ctx := context.Background()
	list, err := collectUploads(dir, "p/", nil)
	if err != nil {
		t.Fatal(err)
	}
	var prog uploadProgress
	if err := uploadAll(ctx, store, list, 2, 0, &prog); err != nil {
		t.Fatal(err)
	}
	// Changes after the upload: a size change, a newer mtime, a new file.
	if err := os.WriteFile(filepath.Join(dir, "grown.txt"), []byte("v2 longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "touched.txt"), future, future); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "new.txt"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err = collectUploads(dir, "p/", nil)
	if err != nil {
		t.Fatal(err)
	}
	same, err := unchangedUploads(ctx, store, "p/", list)
	if err != nil {
		t.Fatal(err)
	}
	if len(same) != 1 || !same["p/same.txt"] {
		t.Errorf("unchanged: %v, want only p/same.txt", same)
	}
}
