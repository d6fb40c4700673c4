package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"

	"github.com/spf13/pflag"

	"github.com/os2g/os2g/objclient"
)

// S3URL is a parsed s3://BUCKET[/PREFIX] argument.
type S3URL struct {
	Bucket string
	// Prefix is the key prefix, "" for the whole bucket, else ending in "/".
	Prefix string
}

// String renders the URL back ("s3://bucket/prefix/").
func (u S3URL) String() string { return "s3://" + u.Bucket + "/" + u.Prefix }

// ParseS3URL parses s3://BUCKET, s3://BUCKET/ or s3://BUCKET/PREFIX[/].
// A non-empty prefix always gets a trailing "/" so that it names a
// directory (s3://b/train -> Prefix "train/").
func ParseS3URL(s string) (S3URL, error) {
	rest, ok := strings.CutPrefix(s, "s3://")
	if !ok {
		return S3URL{}, fmt.Errorf("%q is not an s3:// URL (want s3://BUCKET[/PREFIX])", s)
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return S3URL{}, fmt.Errorf("%q has no bucket name (want s3://BUCKET[/PREFIX])", s)
	}
	if strings.ContainsAny(bucket, " ?#\\") {
		return S3URL{}, fmt.Errorf("%q: invalid bucket name %q", s, bucket)
	}
	// Each prefix component becomes a directory name: "", "." and ".."
	// cannot be one (s3://data//x, s3://data/a/../b).
	for i, c := range strings.Split(strings.TrimSuffix(prefix, "/"), "/") {
		if prefix == "" {
			break
		}
		switch c {
		case "":
			return S3URL{}, fmt.Errorf("%q has an empty path component (component %d of the prefix; write s3://%s/%s)", s, i+1, bucket, cleanPrefix(prefix))
		case ".", "..":
			return S3URL{}, fmt.Errorf("%q has a %q path component, which cannot be a directory name", s, c)
		}
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return S3URL{Bucket: bucket, Prefix: prefix}, nil
}

// cleanPrefix drops empty components from a prefix ("a//b/" -> "a/b").
func cleanPrefix(p string) string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return strings.Join(out, "/")
}

// connFlags are the connection flags shared by mount and upload.
type connFlags struct {
	endpoint       string
	region         string
	profile        string
	forcePathStyle bool
	partSize       sizeFlag
	fs             *pflag.FlagSet
}

// register defines the source flags (endpoint, region, profile, addressing).
func (c *connFlags) register(fs *pflag.FlagSet) {
	c.fs = fs
	fs.StringVar(&c.endpoint, "endpoint-url", "", "S3 endpoint URL, e.g. http://127.0.0.1:7070 (default: $AWS_ENDPOINT_URL, else AWS)")
	fs.StringVar(&c.region, "region", "", "region (default: $AWS_REGION or the profile's, else us-east-1)")
	fs.StringVar(&c.profile, "profile", "", "shared config/credentials profile (default: $AWS_PROFILE or default)")
	fs.BoolVar(&c.forcePathStyle, "force-path-style", false, "path-style addressing (endpoint/bucket/key); defaults to true when an endpoint URL is given (flag or $AWS_ENDPOINT_URL), pass --force-path-style=false for virtual-hosted style")
}

// registerPartSize defines --part-size.
func (c *connFlags) registerPartSize(fs *pflag.FlagSet) {
	fs.Var(&c.partSize, "part-size", "size of ranged GETs and of multipart upload parts, 5MiB to 5GiB, e.g. 8MiB (default 8MiB)")
}

// Part size bounds of S3 multipart uploads, bytes.
const (
	minPartSize = 5 << 20
	maxPartSize = 5 << 30
)

// validate checks the flag values that need no network (exit status 2).
func (c *connFlags) validate() error {
	if c.partSize.set && (c.partSize.v < minPartSize || c.partSize.v > maxPartSize) {
		return usageErr("--part-size %s is outside S3's multipart part sizes, 5MiB to 5GiB", FormatSize(c.partSize.v))
	}
	return nil
}

// wasSet reports whether the named flag was given on the command line.
func wasSet(fs *pflag.FlagSet, name string) bool {
	return fs != nil && fs.Changed(name)
}

// endpointInUse is the endpoint the SDK will talk to, for messages.
func (c *connFlags) endpointInUse(e Env) string {
	switch {
	case c.endpoint != "":
		return c.endpoint
	case e.getenv("AWS_ENDPOINT_URL_S3") != "":
		return e.getenv("AWS_ENDPOINT_URL_S3")
	case e.getenv("AWS_ENDPOINT_URL") != "":
		return e.getenv("AWS_ENDPOINT_URL")
	}
	return ""
}

// regionInUse is the region requests are signed for, for messages ("" if
// the SDK's default applies: the profile's, else us-east-1).
func (c *connFlags) regionInUse(e Env) string {
	for _, r := range []string{c.region, e.getenv("AWS_REGION"), e.getenv("AWS_DEFAULT_REGION")} {
		if r != "" {
			return r
		}
	}
	return ""
}

// options builds the objclient.Options for bucket. Credentials are left to
// the SDK's default chain.
func (c *connFlags) options(e Env, bucket string, log *slog.Logger) (objclient.Options, error) {
	if c.endpoint != "" {
		u, err := url.Parse(c.endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return objclient.Options{}, usageErr("--endpoint-url %q is not an http:// or https:// URL", c.endpoint)
		}
	}
	pathStyle := c.forcePathStyle
	if !wasSet(c.fs, "force-path-style") && c.endpointInUse(e) != "" {
		pathStyle = true
	}
	return objclient.Options{
		Bucket:         bucket,
		Region:         c.region,
		Endpoint:       c.endpoint,
		Profile:        c.profile,
		ForcePathStyle: pathStyle,
		PartSize:       c.partSize.v,
		Logger:         log,
	}, nil
}

// describeStoreErr turns a CheckBucket/objclient error into the one-line
// message a user can act on. It never includes credentials.
func describeStoreErr(err error, bucket, endpoint string) string {
	return describeStoreErrIn(err, bucket, endpoint, "")
}

// describeStoreErrIn is describeStoreErr for a request signed for region
// ("" for the default), which a region mismatch names.
func describeStoreErrIn(err error, bucket, endpoint, region string) string {
	where := endpoint
	if where == "" {
		where = "AWS S3"
	}
	if msg, ok := diagnoseStoreErr(err, bucket, where, region); ok {
		return msg
	}
	switch {
	case errors.Is(err, objclient.ErrNoSuchBucket):
		return fmt.Sprintf("bucket %q does not exist at %s", bucket, where)
	case errors.Is(err, objclient.ErrInvalidCredentials):
		return fmt.Sprintf("%s rejected the credentials for bucket %q (unknown access key or wrong secret); check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or --profile", where, bucket)
	case errors.Is(err, objclient.ErrAccessDenied):
		return fmt.Sprintf("access to bucket %q denied by %s (wrong credentials, or no permission on the bucket)", bucket, where)
	case errors.Is(err, objclient.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		cause := oneLine(err.Error())
		var oe *net.OpError
		if errors.As(err, &oe) {
			cause = oe.Error()
		} else if errors.Is(err, context.DeadlineExceeded) {
			cause = "no answer in time"
		}
		return fmt.Sprintf("cannot reach the object store at %s: %s", where, cause)
	case errors.Is(err, objclient.ErrThrottled):
		return fmt.Sprintf("%s keeps throttling requests for bucket %q: %s", where, bucket, oneLine(err.Error()))
	case objclient.Code(err) == "InvalidBucketName":
		return fmt.Sprintf("%s refused %q as a bucket name (S3 bucket names are 3 to 63 lowercase letters, digits, dots and hyphens)", where, bucket)
	}
	return fmt.Sprintf("checking bucket %q at %s: %s", bucket, where, oneLine(err.Error()))
}
