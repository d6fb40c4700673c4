package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go"

	"github.com/os2g/os2g/objclient"
)

// Diagnoses that turn the failures a new user meets into one sentence
// naming the fix (issue 16 item 4, issue 14 item 7).

// checkCredentials resolves credentials with the SDK's default chain (the
// chain objclient uses) before anything is sent, and says where it looked
// when there are none. profile is --profile; getenv reads the environment
// the SDK reads. It gives up after 20 s (an instance-metadata endpoint
// that does not answer).
func checkCredentials(ctx context.Context, profile string, getenv func(string) string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var opts []func(*config.LoadOptions) error
	if profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(profile))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return fmt.Errorf("loading the AWS configuration: %w", err)
	}
	if cfg.Credentials == nil {
		return errors.New(noCredentialsMessage(profile, getenv, nil))
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return errors.New(noCredentialsMessage(profile, getenv, err))
	}
	return nil
}

// noCredentialsMessage says that no credentials were found and lists the
// places of the default chain, each with what was found there. cause is
// the chain's last error (instance metadata's, usually), or nil.
func noCredentialsMessage(profile string, getenv func(string) string, cause error) string {
	if profile == "" {
		profile = getenv("AWS_PROFILE")
	}
	if profile == "" {
		profile = "default"
	}
	home := getenv("HOME")
	file := func(envName, def string) string {
		p := getenv(envName)
		if p == "" && home != "" {
			p = filepath.Join(home, ".aws", def)
		}
		if p == "" {
			return "no $HOME"
		}
		if _, err := os.Stat(p); err != nil {
			return p + " (missing)"
		}
		return p + " (no keys for profile " + profile + ")"
	}
	envState := "not set"
	if getenv("AWS_ACCESS_KEY_ID") != "" {
		envState = "AWS_SECRET_ACCESS_KEY not set"
	}
	imds := "no answer"
	switch {
	case strings.EqualFold(getenv("AWS_EC2_METADATA_DISABLED"), "true"):
		imds = "disabled by AWS_EC2_METADATA_DISABLED=true"
	case cause != nil && errors.Is(cause, context.DeadlineExceeded):
		imds = "no answer in time"
	}
	webID := "not set"
	if getenv("AWS_WEB_IDENTITY_TOKEN_FILE") != "" {
		webID = "set, but no role assumed"
	}
	return fmt.Sprintf("no AWS credentials found; os2g looked in: "+
		"the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY: %s), "+
		"the shared credentials file %s, the config file %s, "+
		"web identity (AWS_WEB_IDENTITY_TOKEN_FILE: %s), "+
		"container credentials (AWS_CONTAINER_CREDENTIALS_*: %s), "+
		"instance metadata (%s); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or pass --profile",
		envState, file("AWS_SHARED_CREDENTIALS_FILE", "credentials"), file("AWS_CONFIG_FILE", "config"),
		webID, setOrNot(getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")+getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI")), imds)
}

func setOrNot(s string) string {
	if s == "" {
		return "not set"
	}
	return "set, but no answer"
}

// apiMessage is the server's error message of err, if it has one.
func apiMessage(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorMessage()
	}
	return ""
}

// diagnoseStoreErr handles the failures describeStoreErr's sentinels lump
// together: a region mismatch and a clock skew (both rejected signatures
// or 301/400s), and plain HTTP spoken on an https:// endpoint. ok is
// false when err is none of them.
func diagnoseStoreErr(err error, bucket, where, region string) (msg string, ok bool) {
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) || (errors.Is(err, objclient.ErrUnavailable) && speaksPlainHTTP(where)) {
		return fmt.Sprintf("%s does not speak TLS (it answered in plain HTTP); use an http:// endpoint URL", where), true
	}
	if region == "" {
		region = "us-east-1"
	}
	server := apiMessage(err)
	if server != "" {
		server = " (" + oneLine(server) + ")"
	}
	switch objclient.Code(err) {
	case "RequestTimeTooSkewed":
		return fmt.Sprintf("%s refused the request because this machine's clock is off by more than 15 minutes%s; fix the clock (timedatectl set-ntp true, or chrony/ntpd)", where, server), true
	case "AuthorizationHeaderMalformed", "PermanentRedirect", "IllegalLocationConstraintException", "IncorrectEndpoint":
		return fmt.Sprintf("bucket %q is not in region %s%s; pass --region with the bucket's region (or set AWS_REGION)", bucket, region, server), true
	}
	return "", false
}

// speaksPlainHTTP reports whether endpoint is an https:// URL whose server
// answers a TLS handshake with something that is not TLS (net/http turns
// that into an untyped error, so the handshake is tried again here).
func speaksPlainHTTP(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return false
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{ServerName: u.Hostname()}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", host)
	if err == nil {
		c.Close()
		return false
	}
	var rh tls.RecordHeaderError
	return errors.As(err, &rh)
}

// fuseAccessProblem says why a non-root user cannot mount, or "" if
// nothing is in the way: /dev/fuse must be readable and writable and
// fusermount3 (or fusermount) installed. access is syscall.Access; look
// is exec.LookPath.
func fuseAccessProblem(euid int, userName string, access func(path string, mode uint32) error, look func(string) (string, error)) string {
	if euid == 0 {
		return ""
	}
	if err := access("/dev/fuse", 6); err != nil { // R_OK|W_OK
		if errors.Is(err, syscall.ENOENT) {
			return "/dev/fuse does not exist: load the fuse kernel module (modprobe fuse), or in a container pass --device /dev/fuse"
		}
		return fmt.Sprintf("user %s may not open /dev/fuse (%v): run os2g as root, or give the user access, e.g. add it to the group that owns /dev/fuse, or in a container pass --device /dev/fuse", userName, err)
	}
	_, err3 := look("fusermount3")
	_, err2 := look("fusermount")
	if err3 != nil && err2 != nil {
		return "fusermount3 is not installed, and a user other than root needs it to mount: install the fuse3 package (apt-get install fuse3)"
	}
	return ""
}

// checkFUSEAccess runs fuseAccessProblem for this process, and with
// allowOther allowOtherProblem for /etc/fuse.conf.
func checkFUSEAccess(allowOther bool) error {
	name := fmt.Sprint(os.Geteuid())
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	if p := fuseAccessProblem(os.Geteuid(), name, syscall.Access, exec.LookPath); p != "" {
		return errors.New(p)
	}
	if allowOther {
		if p := allowOtherProblem(os.Geteuid(), "/etc/fuse.conf"); p != "" {
			return errors.New(p)
		}
	}
	return nil
}

// allowOtherProblem says why --allow-other will fail for a non-root user:
// fusermount3 refuses allow_other unless the FUSE configuration file conf
// has a user_allow_other line. "" when nothing is in the way.
func allowOtherProblem(euid int, conf string) string {
	if euid == 0 {
		return ""
	}
	b, err := os.ReadFile(conf)
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.TrimSpace(line) == "user_allow_other" {
				return ""
			}
		}
	}
	return fmt.Sprintf("--allow-other needs the line user_allow_other in %s for a user other than root (add it as root, or mount without --allow-other)", conf)
}

// getenvOS is os.Getenv (for tests that read what the SDK reads).
func getenvOS(k string) string { return os.Getenv(k) }
