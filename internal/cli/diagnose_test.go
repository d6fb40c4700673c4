package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/smithy-go"

	"github.com/os2g/os2g/objclient"
)

// noCreds empties the credential chain of this process: no keys in the
// environment, no shared files, no instance metadata (never contacted).
func noCreds(t *testing.T) {
	dir := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", dir)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// osEnv reads the real environment (what the SDK reads).
func osEnv(k string) string { return getenvOS(k) }

// TestCheckCredentials: with no credentials anywhere the error says so
// and names every place of the chain; with keys in the environment it
// passes.
func TestCheckCredentials(t *testing.T) {
	noCreds(t)
	err := checkCredentials(context.Background(), "", osEnv)
	if err == nil {
		t.Fatal("no credentials: nil error")
	}
	msg := err.Error()
	for _, want := range []string{"no AWS credentials found", "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY: not set",
		"credentials (missing)", "config (missing)", "instance metadata (disabled by AWS_EC2_METADATA_DISABLED=true)", "--profile"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "cannot reach") || strings.Contains(msg, "\n") {
		t.Errorf("message %q is not one line about credentials", msg)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	if err := checkCredentials(context.Background(), "", osEnv); err == nil || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY not set") {
		t.Errorf("key id without secret: %v", err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	if err := checkCredentials(context.Background(), "", osEnv); err != nil {
		t.Errorf("keys in the environment: %v", err)
	}
}

// TestNoCredentialsThroughMain: os2g upload with no credentials exits 1
// with the credentials message, not a connection error (issue 14 item 7).
func TestNoCredentialsThroughMain(t *testing.T) {
	noCreds(t)
	code, _, errOut := runMain(t, map[string]string{"AWS_EC2_METADATA_DISABLED": "true", "HOME": getenvOS("HOME")},
		"upload", "--endpoint-url", "http://127.0.0.1:9", t.TempDir(), "s3://bucket/x")
	if code != 1 || !strings.Contains(errOut, "os2g: upload: no AWS credentials found; os2g looked in:") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestDiagnoseStoreErr: region mismatch, clock skew and wrong key are
// told apart; other errors are left to describeStoreErr.
func TestDiagnoseStoreErr(t *testing.T) {
	api := func(code, msg string) error {
		return fmt.Errorf("check bucket: %w", &smithy.GenericAPIError{Code: code, Message: msg})
	}
	tests := []struct {
		err    error
		region string
		want   string
	}{
		{api("RequestTimeTooSkewed", "The difference between the request time and the current time is too large."), "", "clock is off by more than 15 minutes"},
		{api("AuthorizationHeaderMalformed", "the region 'us-east-1' is wrong; expecting 'eu-west-1'"), "", `bucket "b" is not in region us-east-1 (the region 'us-east-1' is wrong; expecting 'eu-west-1'); pass --region`},
		{api("PermanentRedirect", "use the endpoint of the bucket's region"), "eu-central-1", "not in region eu-central-1"},
		{api("SignatureDoesNotMatch", "x"), "", `rejected the credentials for bucket "b"`},
		{api("InvalidAccessKeyId", "x"), "", `rejected the credentials for bucket "b"`},
	}
	for _, tc := range tests {
		// The objclient sentinel wrapping of a real error.
		err := tc.err
		if c := objclient.Code(err); c == "SignatureDoesNotMatch" || c == "InvalidAccessKeyId" {
			err = fmt.Errorf("%w: %w", objclient.ErrInvalidCredentials, err)
		}
		got := describeStoreErrIn(err, "b", "http://h:1", tc.region)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%v: %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestHTTPSToPlainHTTP: an https:// endpoint that answers in plain HTTP
// gets one line saying so.
func TestHTTPSToPlainHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	endpoint := "https://" + strings.TrimPrefix(srv.URL, "http://")
	err := checkBucket(context.Background(), objclient.Options{
		Bucket: "b", Endpoint: endpoint, Region: "us-east-1", ForcePathStyle: true,
		AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret",
	})
	if err == nil {
		t.Fatal("CheckBucket over TLS to a plain HTTP server succeeded")
	}
	got := describeStoreErr(err, "b", endpoint)
	if want := endpoint + " does not speak TLS (it answered in plain HTTP); use an http:// endpoint URL"; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// TestFUSEAccessProblem: a non-root user without /dev/fuse access, or
// without fusermount3, is told the fix; root and a user with access pass.
func TestFUSEAccessProblem(t *testing.T) {
	ok := func(string, uint32) error { return nil }
	denied := func(string, uint32) error { return syscall.EACCES }
	missing := func(string, uint32) error { return syscall.ENOENT }
	found := func(string) (string, error) { return "/bin/fusermount3", nil }
	none := func(string) (string, error) { return "", errors.New("not found") }
	tests := []struct {
		euid   int
		access func(string, uint32) error
		look   func(string) (string, error)
		want   string
	}{
		{0, denied, none, ""},
		{1000, ok, found, ""},
		{1000, denied, found, "user alice may not open /dev/fuse (permission denied): run os2g as root, or give the user access"},
		{1000, missing, found, "/dev/fuse does not exist: load the fuse kernel module"},
		{1000, ok, none, "fusermount3 is not installed"},
	}
	for _, tc := range tests {
		got := fuseAccessProblem(tc.euid, "alice", tc.access, tc.look)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("euid %d: %q, want %q", tc.euid, got, tc.want)
		}
	}
}

func TestAllowOtherProblem(t *testing.T) {
	dir := t.TempDir()
	with := filepath.Join(dir, "with.conf")
	without := filepath.Join(dir, "without.conf")
	os.WriteFile(with, []byte("# mount_max = 1000\n user_allow_other \n"), 0o644)
	os.WriteFile(without, []byte("#user_allow_other\n"), 0o644)
	if p := allowOtherProblem(1000, with); p != "" {
		t.Errorf("with user_allow_other: %q", p)
	}
	if p := allowOtherProblem(0, without); p != "" {
		t.Errorf("root: %q", p)
	}
	for _, conf := range []string{without, filepath.Join(dir, "missing.conf")} {
		if p := allowOtherProblem(1000, conf); !strings.Contains(p, "--allow-other needs the line user_allow_other in "+conf) {
			t.Errorf("%s: %q", conf, p)
		}
	}
}
