package objclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	smithytime "github.com/aws/smithy-go/time"
)

// errRawFallback marks a raw HEAD reply that head does not read the way
// the SDK would (a redirect, a 2xx other than 200, a missing or malformed
// Content-Length or Last-Modified): Stat then asks again through the SDK,
// whose answer (or error) stands.
var errRawFallback = errors.New("objclient: raw HEAD reply needs the SDK")

// head sends HEAD key without the SDK's middleware stack, on the same
// pooled keep-alive connections, signer and retry policy as the raw ranged
// GETs (rawget.go), and returns what HeadObject would: Size from
// Content-Length (bytes), ETag, LastModified, ContentType and the
// x-amz-meta-* Metadata (keys lower-case without the prefix, first value,
// trimmed, as the SDK's deserializer keeps them).
//
// Errors are in the SDK's shapes (see responseError): a HEAD reply has no
// body, so a 404 carries the code "NotFound", a 403 "Forbidden", a 400
// "BadRequest", and normalise maps them by status as for the SDK. A reply
// the SDK might read differently wraps errRawFallback.
//
// Why: a directory listing of zero-byte objects costs one HEAD per object
// to tell an application/x-directory marker from an empty file (CASES
// C02); through the SDK each HEAD spends most of its client CPU in the
// middleware stack (issue 14 item 5).
func (g *rawGetter) head(ctx context.Context, key string) (ObjectInfo, error) {
	var oi ObjectInfo
	err := g.withRetries(ctx, func() error {
		var err error
		oi, err = g.headOnce(ctx, key)
		return err
	})
	return oi, err
}

func (g *rawGetter) headOnce(ctx context.Context, key string) (ObjectInfo, error) {
	req, err := g.newRequest(ctx, http.MethodHead, key)
	if err != nil {
		return ObjectInfo{}, err
	}
	resp, err := g.send(ctx, req)
	if err != nil {
		return ObjectInfo{}, err
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		resp.Body.Close()
		return headInfo(key, resp.Header)
	case resp.StatusCode < 400:
		resp.Body.Close()
		return ObjectInfo{}, fmt.Errorf("%w: status %d", errRawFallback, resp.StatusCode)
	}
	return ObjectInfo{}, responseError(resp)
}

// headInfo reads a 200 HEAD reply's headers.
func headInfo(key string, h http.Header) (ObjectInfo, error) {
	oi := ObjectInfo{
		Key:         key,
		ETag:        strings.TrimSpace(h.Get("ETag")),
		ContentType: strings.TrimSpace(h.Get("Content-Type")),
	}
	cl := h.Values("Content-Length")
	if len(cl) != 1 {
		return ObjectInfo{}, fmt.Errorf("%w: %d Content-Length headers", errRawFallback, len(cl))
	}
	n, err := strconv.ParseInt(strings.TrimSpace(cl[0]), 10, 64)
	if err != nil || n < 0 {
		return ObjectInfo{}, fmt.Errorf("%w: Content-Length %q", errRawFallback, cl[0])
	}
	oi.Size = n
	if lm := strings.TrimSpace(h.Get("Last-Modified")); lm != "" {
		t, err := smithytime.ParseHTTPDate(lm)
		if err != nil {
			return ObjectInfo{}, fmt.Errorf("%w: Last-Modified %q", errRawFallback, lm)
		}
		oi.LastModified = t
	}
	for k, v := range h {
		const prefix = "x-amz-meta-"
		if len(k) <= len(prefix) || !strings.EqualFold(k[:len(prefix)], prefix) || len(v) == 0 {
			continue
		}
		if oi.Metadata == nil {
			oi.Metadata = make(map[string]string)
		}
		oi.Metadata[strings.ToLower(k[len(prefix):])] = strings.TrimSpace(v[0])
	}
	return oi, nil
}
