package objtest

import (
	"bytes"
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"

	"github.com/os2g/os2g/objclient"
)

// FakeBucket is the bucket StartFakeS3 and StartFakeS3Server create.
const FakeBucket = "test-bucket"

// Static test credentials of the servers started here. gofakes3 does not
// check signatures; versitygw does.
const (
	TestAccessKey = "os2gtestkey"
	TestSecretKey = "os2gtestsecret0123456789"
)

// Server describes a running S3 endpoint and one bucket on it.
type Server struct {
	URL             string // endpoint, "http://127.0.0.1:PORT"
	Bucket          string
	AccessKeyID     string
	SecretAccessKey string
}

// Options returns objclient.Options for the server's bucket: path-style
// addressing, static credentials, region us-east-1, checksums only when
// required, and retry delays of 5 ms base / 50 ms cap so that error tests
// are fast. Callers adjust fields (MaxAttempts, StallTimeout, Endpoint for
// a FaultProxy) before passing them to NewS3.
func (s *Server) Options() objclient.Options {
	return objclient.Options{
		Bucket:               s.Bucket,
		Region:               "us-east-1",
		Endpoint:             s.URL,
		ForcePathStyle:       true,
		AccessKeyID:          s.AccessKeyID,
		SecretAccessKey:      s.SecretAccessKey,
		ChecksumWhenRequired: true,
		RetryBaseDelay:       5 * time.Millisecond,
		RetryMaxDelay:        50 * time.Millisecond,
	}
}

// NewS3 builds a store with objclient.New and fails the test on error.
func NewS3(t testing.TB, o objclient.Options) *objclient.S3 {
	t.Helper()
	s, err := objclient.New(context.Background(), o)
	if err != nil {
		t.Fatalf("objtest: objclient.New(%s, bucket %q): %v", o.Endpoint, o.Bucket, err)
	}
	return s
}

// StartFakeS3Server starts gofakes3 (in-memory backend) behind an
// httptest server on 127.0.0.1 with bucket FakeBucket created. It shuts
// down on t.Cleanup. gofakes3 holds keys verbatim: a key "a" may sit beside
// "a/b", and "//" stays in a key. Listing, If-Match on reads, conditional
// CompleteMultipartUpload and multipart ETags are corrected to S3's
// behaviour (see fakes3_fix.go). Signatures are not checked.
func StartFakeS3Server(t testing.TB) *Server {
	t.Helper()
	backend := newFixedBackend()
	if err := backend.CreateBucket(FakeBucket); err != nil {
		t.Fatalf("objtest: gofakes3 create bucket: %v", err)
	}
	faker := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	ts := httptest.NewServer(&fakeFront{b: backend, next: faker.Server()})
	t.Cleanup(ts.Close)
	return &Server{URL: ts.URL, Bucket: FakeBucket, AccessKeyID: TestAccessKey, SecretAccessKey: TestSecretKey}
}

// StartFakeS3 starts gofakes3 (see StartFakeS3Server) and returns a real
// objclient store on its bucket "test-bucket".
func StartFakeS3(t testing.TB) *objclient.S3 {
	t.Helper()
	return NewS3(t, StartFakeS3Server(t).Options())
}

// PutRaw writes one object through the SDK client of s, bypassing the
// Store's Writer, so tests can create objects other tools make: directory
// markers with Content-Type application/x-directory, x-amz-meta-* metadata
// (meta keys without the prefix). contentType "" leaves the server's default.
func PutRaw(t testing.TB, s *objclient.S3, key string, data []byte, contentType string, meta map[string]string) {
	t.Helper()
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.Bucket()),
		Key:           aws.String(key),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		Metadata:      meta,
	}
	if contentType != "" {
		in.ContentType = aws.String(contentType)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Client().PutObject(ctx, in); err != nil {
		t.Fatalf("objtest: PutRaw %q: %v", key, err)
	}
}

// rawClient is a bare SDK client for server administration (bucket
// creation and removal), independent of objclient.
func rawClient(endpoint, access, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region:                     "us-east-1",
		BaseEndpoint:               aws.String(endpoint),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(access, secret, ""),
		HTTPClient:                 awshttp.NewBuildableClient(),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}
