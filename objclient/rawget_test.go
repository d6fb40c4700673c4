package objclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func rawTestStore(t *testing.T, o Options) *S3 {
	t.Helper()
	if o.AccessKeyID == "" {
		o.AccessKeyID, o.SecretAccessKey = "AKIDEXAMPLE", "secret"
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Buckets the SDK signs other than with plain SigV4 for "s3" keep their
// GETs in the SDK; ordinary buckets, on AWS or a custom endpoint, take the
// raw path with the endpoint's signing region.
func TestRawGetSigningSchemes(t *testing.T) {
	// Not the endpoint of a test server from the environment (scripts/test.sh).
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	for _, c := range []struct {
		name string
		o    Options
		raw  bool
		base string
	}{
		{"aws virtual host", Options{Bucket: "data", Region: "eu-west-1"}, true, "https://data.s3.eu-west-1.amazonaws.com"},
		{"custom path style", Options{Bucket: "data", Endpoint: "http://127.0.0.1:9000", ForcePathStyle: true}, true, "http://127.0.0.1:9000/data"},
		{"s3 express directory bucket", Options{Bucket: "data--usw2-az1--x-s3", Region: "us-west-2"}, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := rawTestStore(t, c.o)
			if got := s.raw != nil; got != c.raw {
				t.Fatalf("raw GET path set up = %v, want %v", got, c.raw)
			}
			if c.raw && s.raw.base != c.base {
				t.Errorf("base URL %q, want %q", s.raw.base, c.base)
			}
			if c.raw && s.raw.region != s.client.Options().Region {
				t.Errorf("signing region %q, want %q", s.raw.region, s.client.Options().Region)
			}
		})
	}
}

// A server whose clock is an hour ahead answers RequestTimeTooSkewed to a
// request signed with ours; the GET is signed again with the server's time
// from the reply's Date header and succeeds.
func TestRawGetClockSkew(t *testing.T) {
	ahead := time.Hour
	var requests int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		server := time.Now().Add(ahead).UTC()
		w.Header().Set("Date", server.Format(http.TimeFormat))
		signed, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
		if err != nil || server.Sub(signed).Abs() > 15*time.Minute {
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`<?xml version="1.0"?><Error><Code>RequestTimeTooSkewed</Code><Message>too skewed</Message></Error>`))
			return
		}
		if !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Header().Set("ETag", `"e1"`)
		w.Header().Set("Content-Range", "bytes 0-4/5")
		w.WriteHeader(http.StatusPartialContent)
		_, _ = w.Write([]byte("hello"))
	}))
	defer srv.Close()
	s := rawTestStore(t, Options{Bucket: "data", Endpoint: srv.URL, ForcePathStyle: true, MaxAttempts: 3})
	if s.raw == nil {
		t.Fatal("raw GET path not set up")
	}
	buf := make([]byte, 5)
	n, err := s.GetRange(context.Background(), "k", 0, buf, "")
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("GetRange = %q, %v; want hello", buf[:n], err)
	}
	if requests != 2 {
		t.Errorf("%d requests, want 2 (one refused as skewed, one signed with the server's time)", requests)
	}
	if got := time.Duration(s.raw.skew.Load()); (got - ahead).Abs() > time.Minute {
		t.Errorf("learned skew %v, want about %v", got, ahead)
	}
}
