package objclient_test

// Tests for CASES C19: temporary credentials that expire during a long run.
//
// The store under test gets its credentials the way a container does: from
// a local container-credentials endpoint named by
// AWS_CONTAINER_CREDENTIALS_FULL_URI (the SDK accepts http only on loopback
// and the ECS/EKS link-local hosts), with no static keys in Options. The S3
// server is gofakes3, which ignores signatures, behind tokenProxy, a small
// proxy of this file that records which access key signed each request and
// can answer chosen requests with 400 ExpiredToken, like S3 does when a
// server's clock runs ahead of the advertised Expiration.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient"
	"github.com/os2g/os2g/objclient/objtest"
)

// credAuthToken is the AWS_CONTAINER_AUTHORIZATION_TOKEN the endpoint
// demands, as ECS does.
const credAuthToken = "os2g-container-auth"

// credServer is a container-credentials endpoint. Each hit issues a new
// key pair "ASIAOS2G%04d" (hit number) valid for lifetime.
type credServer struct {
	srv *httptest.Server

	mu       sync.Mutex // guards hits, lifetime, badAuth
	hits     int
	lifetime time.Duration
	badAuth  int
}

func startCredServer(t *testing.T, lifetime time.Duration) *credServer {
	t.Helper()
	cs := &credServer{lifetime: lifetime}
	cs.srv = httptest.NewServer(http.HandlerFunc(cs.serve))
	t.Cleanup(cs.srv.Close)
	return cs
}

func (cs *credServer) serve(w http.ResponseWriter, r *http.Request) {
	cs.mu.Lock()
	if r.Header.Get("Authorization") != credAuthToken {
		cs.badAuth++
		cs.mu.Unlock()
		http.Error(w, `{"code":"AccessDenied","message":"bad token"}`, http.StatusForbidden)
		return
	}
	cs.hits++
	n, life := cs.hits, cs.lifetime
	cs.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{
		"AccessKeyId":     credKeyID(n),
		"SecretAccessKey": fmt.Sprintf("secret-%04d", n),
		"Token":           fmt.Sprintf("token-%04d", n),
		"Expiration":      time.Now().Add(life).UTC().Format(time.RFC3339),
	})
}

func credKeyID(n int) string { return fmt.Sprintf("ASIAOS2G%04d", n) }

// Hits returns the number of credentials issued.
func (cs *credServer) Hits() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.hits
}

func (cs *credServer) setLifetime(d time.Duration) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.lifetime = d
}

// useContainerCreds points the SDK's default chain at cs and nothing else:
// no key in the environment, no shared config files, no web identity, no IMDS.
func useContainerCreds(t *testing.T, cs *credServer) {
	t.Helper()
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":                        "",
		"AWS_ACCESS_KEY":                           "",
		"AWS_SECRET_ACCESS_KEY":                    "",
		"AWS_SECRET_KEY":                           "",
		"AWS_SESSION_TOKEN":                        "",
		"AWS_PROFILE":                              "",
		"AWS_DEFAULT_PROFILE":                      "",
		"AWS_CONFIG_FILE":                          none,
		"AWS_SHARED_CREDENTIALS_FILE":              none,
		"AWS_WEB_IDENTITY_TOKEN_FILE":              "",
		"AWS_ROLE_ARN":                             "",
		"AWS_EC2_METADATA_DISABLED":                "true",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI":   "",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE":   "",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN":        credAuthToken,
		"AWS_CONTAINER_CREDENTIALS_FULL_URI":       cs.srv.URL + "/creds",
		"AWS_ENDPOINT_URL":                         "",
		"AWS_ENDPOINT_URL_S3":                      "",
		"AWS_REQUEST_CHECKSUM_CALCULATION":         "",
		"AWS_RESPONSE_CHECKSUM_VALIDATION":         "",
		"AWS_S3_DISABLE_MULTIREGION_ACCESS_POINTS": "",
	} {
		t.Setenv(k, v)
	}
}

// seenRequest is one request that reached tokenProxy.
type seenRequest struct {
	Method, Path string
	Query        url.Values
	KeyID        string // access key of the SigV4 Authorization header
	Token        string // X-Amz-Security-Token
	Expired      bool   // answered 400 ExpiredToken by the proxy
}

// tokenProxy forwards to an S3 endpoint, records every request and answers
// the requests its rules pick with 400 and an S3 error code.
type tokenProxy struct {
	srv *httptest.Server

	mu    sync.Mutex // guards seen, rules
	seen  []seenRequest
	rules []*tokenRule
}

type tokenRule struct {
	match func(r *http.Request) bool
	code  string
	left  int
}

func startTokenProxy(t *testing.T, target string) *tokenProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &tokenProxy{}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	t.Cleanup(tr.CloseIdleConnections)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host
		},
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code := p.note(r); code != "" {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusBadRequest)
			if r.Method != http.MethodHead {
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
					`<Error><Code>%s</Code><Message>The provided token has expired.</Message><RequestId>os2g-creds</RequestId></Error>`, code)
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// failNext answers the next n requests matching match with code.
func (p *tokenProxy) failNext(n int, code string, match func(r *http.Request) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, &tokenRule{match: match, code: code, left: n})
}

// note records r and returns the error code to answer with ("" to forward).
func (p *tokenProxy) note(r *http.Request) string {
	sr := seenRequest{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(),
		KeyID: sigV4KeyID(r.Header.Get("Authorization")),
		Token: r.Header.Get("X-Amz-Security-Token"),
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	code := ""
	for _, rule := range p.rules {
		if rule.left > 0 && rule.match(r) {
			rule.left--
			code = rule.code
			break
		}
	}
	sr.Expired = code != ""
	p.seen = append(p.seen, sr)
	return code
}

// requests returns the recorded requests since the last reset.
func (p *tokenProxy) requests() []seenRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seenRequest(nil), p.seen...)
}

func (p *tokenProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seen = nil
}

// sigV4KeyID extracts the access key from
// "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request, ...".
func sigV4KeyID(auth string) string {
	_, rest, ok := strings.Cut(auth, "Credential=")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// Request classifiers (path-style: /bucket/key).
func isGetObject(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.Count(strings.TrimPrefix(r.URL.Path, "/"), "/") >= 1 &&
		!strings.HasSuffix(r.URL.Path, "/") && r.URL.Query().Get("list-type") == ""
}
func isList(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Query().Get("list-type") == "2"
}
func isUploadPart(r *http.Request) bool {
	return r.Method == http.MethodPut && r.URL.Query().Get("partNumber") != ""
}

// credStore starts gofakes3, the proxy and a credential endpoint with
// credentials valid for lifetime, and returns a store that signs with
// container credentials and talks through the proxy.
func credStore(t *testing.T, lifetime time.Duration) (*objclient.S3, *tokenProxy, *credServer) {
	t.Helper()
	srv := objtest.StartFakeS3Server(t)
	p := startTokenProxy(t, srv.URL)
	cs := startCredServer(t, lifetime)
	useContainerCreds(t, cs)
	o := srv.Options()
	o.Endpoint = p.srv.URL
	o.AccessKeyID, o.SecretAccessKey, o.SessionToken = "", "", ""
	o.Logger = slog.New(slog.DiscardHandler)
	s := objtest.NewS3(t, o)
	if got := cs.Hits(); got != 0 {
		t.Fatalf("objclient.New fetched credentials %d times; it must not contact anything", got)
	}
	return s, p, cs
}

func credCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func credData(n int) []byte {
	b := make([]byte, n)
	x := uint32(0x9e3779b9)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func credPut(t *testing.T, s objclient.Store, key string, data []byte, partSize int64) objclient.ObjectInfo {
	t.Helper()
	ctx := credCtx(t)
	w, err := s.Put(ctx, key, objclient.PutOptions{PartSize: partSize})
	if err != nil {
		t.Fatal(err)
	}
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1<<20+13)
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatalf("Write %q: %v", key, err)
		}
		rest = rest[n:]
	}
	info, err := w.Commit(ctx)
	if err != nil {
		t.Fatalf("Commit %q: %v", key, err)
	}
	return info
}

func credReadAll(t *testing.T, s objclient.Store, key string, size int, etag string) []byte {
	t.Helper()
	buf := make([]byte, size+17)
	n, err := s.GetRange(credCtx(t), key, 0, buf, etag)
	if err != nil {
		t.Fatalf("GetRange %q: %v", key, err)
	}
	return buf[:n]
}

// workload makes a few calls of each kind and returns how many.
func workload(t *testing.T, s objclient.Store, key string, data []byte) int {
	t.Helper()
	ctx := credCtx(t)
	calls := 0
	for range 3 {
		if _, err := s.Stat(ctx, key); err != nil {
			t.Fatalf("Stat: %v", err)
		}
		if got := credReadAll(t, s, key, len(data), ""); !bytes.Equal(got, data) {
			t.Fatalf("GetRange returned %d bytes, not the %d written", len(got), len(data))
		}
		if _, err := s.List(ctx, objclient.ListRequest{Prefix: "train/"}); err != nil {
			t.Fatalf("List: %v", err)
		}
		calls += 3
	}
	return calls
}

// TestContainerCredentialsRefreshedAhead (C19): credentials from the
// container endpoint are cached while they have more than the expiry
// window (5 min, less up to 20% jitter: refresh 4 to 5 min before
// Expiration) left, and fetched again ahead of Expiration once inside it.
func TestContainerCredentialsRefreshedAhead(t *testing.T) {
	data := credData(3000)

	t.Run("long-lived credentials are cached", func(t *testing.T) {
		// 6 min left: outside the window for the next minute at least.
		s, p, cs := credStore(t, 6*time.Minute)
		credPut(t, s, "train/a.bin", data, 0)
		calls := workload(t, s, "train/a.bin", data)
		if got := cs.Hits(); got != 1 {
			t.Errorf("credential endpoint hit %d times for %d calls, want 1 (cached)", got, calls+1)
		}
		for _, r := range p.requests() {
			if r.KeyID != credKeyID(1) || r.Token != "token-0001" {
				t.Fatalf("%s %s signed with key %q token %q, want %q / token-0001", r.Method, r.Path, r.KeyID, r.Token, credKeyID(1))
			}
		}
		cs.mu.Lock()
		bad := cs.badAuth
		cs.mu.Unlock()
		if bad != 0 {
			t.Errorf("%d credential requests without the container authorization token", bad)
		}
	})

	t.Run("credentials inside the expiry window are refreshed", func(t *testing.T) {
		// 3.5 min left, still valid, but inside the 4-5 min refresh window:
		// every request must fetch new credentials before signing.
		s, p, cs := credStore(t, 3*time.Minute+30*time.Second)
		credPut(t, s, "train/a.bin", data, 0)
		calls := workload(t, s, "train/a.bin", data)
		reqs := p.requests()
		if len(reqs) < calls+1 {
			t.Fatalf("%d requests for %d calls", len(reqs), calls+1)
		}
		if got := cs.Hits(); got != len(reqs) {
			t.Errorf("credential endpoint hit %d times for %d signed requests, want one refresh per request", got, len(reqs))
		}
		keys := map[string]bool{}
		for _, r := range reqs {
			if r.KeyID == "" || keys[r.KeyID] {
				t.Fatalf("%s %s signed with key %q: empty or reused though it was inside the expiry window", r.Method, r.Path, r.KeyID)
			}
			keys[r.KeyID] = true
		}
	})
}

// TestExpiredTokenRetriedOnce (C19): a server that rejects the session
// token as expired before its advertised Expiration (clock ahead) makes
// the store invalidate its cached credentials, fetch new ones and retry
// the request once, transparently.
func TestExpiredTokenRetriedOnce(t *testing.T) {
	data := credData(5000)
	for _, tc := range []struct {
		name  string
		code  string
		match func(*http.Request) bool
		call  func(ctx context.Context, s *objclient.S3) error
	}{
		{"GET ExpiredToken", "ExpiredToken", isGetObject, func(ctx context.Context, s *objclient.S3) error {
			buf := make([]byte, len(data))
			n, err := s.GetRange(ctx, "train/a.bin", 0, buf, "")
			if err == nil && !bytes.Equal(buf[:n], data) {
				err = fmt.Errorf("GetRange returned %d wrong bytes", n)
			}
			return err
		}},
		{"LIST ExpiredToken", "ExpiredToken", isList, func(ctx context.Context, s *objclient.S3) error {
			page, err := s.List(ctx, objclient.ListRequest{Prefix: "train/"})
			if err == nil && (len(page.Objects) != 1 || page.Objects[0].Key != "train/a.bin") {
				err = fmt.Errorf("List = %+v", page.Objects)
			}
			return err
		}},
		{"LIST InvalidToken", "InvalidToken", isList, func(ctx context.Context, s *objclient.S3) error {
			_, err := s.List(ctx, objclient.ListRequest{Prefix: "train/"})
			return err
		}},
		{"CheckBucket ExpiredToken", "ExpiredToken", isList, func(ctx context.Context, s *objclient.S3) error {
			return s.CheckBucket(ctx)
		}},
		{"PutObject ExpiredToken", "ExpiredToken", func(r *http.Request) bool {
			return r.Method == http.MethodPut && r.URL.Query().Get("partNumber") == ""
		}, func(ctx context.Context, s *objclient.S3) error {
			w, err := s.Put(ctx, "train/b.bin", objclient.PutOptions{})
			if err != nil {
				return err
			}
			if _, err := w.Write(data); err != nil {
				return err
			}
			_, err = w.Commit(ctx)
			if err == nil {
				buf := make([]byte, len(data)+1)
				n, gerr := s.GetRange(ctx, "train/b.bin", 0, buf, "")
				if gerr != nil || !bytes.Equal(buf[:n], data) {
					return fmt.Errorf("read back after retried PUT: %d bytes, %v", n, gerr)
				}
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p, cs := credStore(t, time.Hour)
			credPut(t, s, "train/a.bin", data, 0)
			p.reset()
			p.failNext(1, tc.code, tc.match)
			if err := tc.call(credCtx(t), s); err != nil {
				t.Fatalf("call with one %s answer: %v (want transparent success)", tc.code, err)
			}
			if got := cs.Hits(); got != 2 {
				t.Errorf("credential endpoint hit %d times, want 2 (one forced refresh)", got)
			}
			var faulted, after []seenRequest
			for _, r := range p.requests() {
				if r.Expired {
					faulted = append(faulted, r)
				} else if len(faulted) > 0 {
					after = append(after, r)
				}
			}
			if len(faulted) != 1 || faulted[0].KeyID != credKeyID(1) {
				t.Fatalf("faulted requests = %+v, want one signed with %s", faulted, credKeyID(1))
			}
			if len(after) == 0 || after[0].KeyID != credKeyID(2) || after[0].Token != "token-0002" {
				t.Fatalf("retry after %s: %+v, want it signed with the refreshed %s", tc.code, after, credKeyID(2))
			}
		})
	}

	t.Run("second ExpiredToken is not retried again", func(t *testing.T) {
		s, p, cs := credStore(t, time.Hour)
		credPut(t, s, "train/a.bin", data, 0)
		p.reset()
		p.failNext(5, "ExpiredToken", isList)
		_, err := s.List(credCtx(t), objclient.ListRequest{Prefix: "train/"})
		if !errors.Is(err, objclient.ErrInvalidCredentials) {
			t.Fatalf("List rejected twice = %v, want ErrInvalidCredentials", err)
		}
		if n := len(p.requests()); n != 2 {
			t.Errorf("%d LIST requests, want 2 (the call and one retry)", n)
		}
		if got := cs.Hits(); got != 2 {
			t.Errorf("credential endpoint hit %d times, want 2", got)
		}
	})

	t.Run("HEAD ExpiredToken", func(t *testing.T) {
		// S3 answers a HEAD with no body, so the only signal is the status.
		s, p, cs := credStore(t, time.Hour)
		credPut(t, s, "train/a.bin", data, 0)
		p.reset()
		p.failNext(1, "ExpiredToken", func(r *http.Request) bool { return r.Method == http.MethodHead })
		info, err := s.Stat(credCtx(t), "train/a.bin")
		if err != nil {
			t.Fatalf("Stat after a HEAD rejected with a bare 400: %v (credential endpoint hits %d)", err, cs.Hits())
		}
		if info.Size != int64(len(data)) {
			t.Fatalf("Stat size = %d, want %d", info.Size, len(data))
		}
	})
}

// TestMultipartAcrossRefresh (C19): a multipart upload continues across a
// credential refresh, forced or scheduled; the upload ID is not tied to
// the credentials, and the object has the bytes written.
func TestMultipartAcrossRefresh(t *testing.T) {
	data := credData(11 << 20)
	check := func(t *testing.T, s *objclient.S3, p *tokenProxy, info objclient.ObjectInfo) []seenRequest {
		t.Helper()
		if info.Size != int64(len(data)) {
			t.Errorf("Commit size = %d, want %d", info.Size, len(data))
		}
		if got := credReadAll(t, s, "ckpt/model.pt", len(data), info.ETag); !bytes.Equal(got, data) {
			t.Fatalf("object read back has %d bytes, differing from the %d written", len(got), len(data))
		}
		ups, err := s.ListUploads(credCtx(t), "ckpt/")
		if err != nil || len(ups) != 0 {
			t.Fatalf("uploads left = %v, %v", ups, err)
		}
		var parts []seenRequest
		ids := map[string]bool{}
		for _, r := range p.requests() {
			if id := r.Query.Get("uploadId"); id != "" {
				ids[id] = true
			}
			if r.Method == http.MethodPut && r.Query.Get("partNumber") != "" {
				parts = append(parts, r)
			}
		}
		if len(ids) != 1 {
			t.Errorf("upload IDs used = %v, want exactly one across the refresh", ids)
		}
		return parts
	}

	t.Run("forced refresh on ExpiredToken", func(t *testing.T) {
		s, p, cs := credStore(t, time.Hour)
		p.failNext(1, "ExpiredToken", isUploadPart)
		info := credPut(t, s, "ckpt/model.pt", data, 5<<20)
		if got := cs.Hits(); got != 2 {
			t.Errorf("credential endpoint hit %d times, want 2 (initial + forced refresh)", got)
		}
		parts := check(t, s, p, info)
		var faulted *seenRequest
		nums := map[string]int{}
		for i, r := range parts {
			nums[r.Query.Get("partNumber")]++
			if r.Expired {
				faulted = &parts[i]
			}
		}
		if faulted == nil {
			t.Fatal("no UploadPart was answered ExpiredToken")
		}
		// Parts 1, 2, 3 (5+5+1 MiB), the faulted one sent twice.
		if len(parts) != 4 || nums["1"]+nums["2"]+nums["3"] != 4 {
			t.Fatalf("UploadPart requests by part number = %v, want parts 1-3 with one sent twice", nums)
		}
		retried := false
		for _, r := range parts {
			if !r.Expired && r.Query.Get("partNumber") == faulted.Query.Get("partNumber") {
				retried = r.KeyID == credKeyID(2)
			}
		}
		if !retried {
			t.Errorf("part %s was not resent with the refreshed key %s: %+v", faulted.Query.Get("partNumber"), credKeyID(2), parts)
		}
		for _, r := range p.requests() {
			if r.Method == http.MethodPost && r.Query.Has("uploadId") && r.KeyID != credKeyID(2) {
				t.Errorf("CompleteMultipartUpload signed with %s, want the refreshed %s", r.KeyID, credKeyID(2))
			}
		}
	})

	t.Run("scheduled rotation during the upload", func(t *testing.T) {
		// Credentials inside the expiry window: every request is signed
		// with freshly fetched keys, so the parts go up under different
		// credentials than CreateMultipartUpload.
		s, p, cs := credStore(t, 3*time.Minute+30*time.Second)
		info := credPut(t, s, "ckpt/model.pt", data, 5<<20)
		parts := check(t, s, p, info)
		if len(parts) != 3 {
			t.Fatalf("%d UploadPart requests, want 3", len(parts))
		}
		keys := map[string]bool{}
		for _, r := range p.requests() {
			keys[r.KeyID] = true
		}
		if len(keys) < 5 || cs.Hits() < 5 {
			t.Errorf("create, 3 parts and complete signed with %d distinct keys (%d credential fetches), want 5", len(keys), cs.Hits())
		}
	})
}
