package objclient

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// Request metrics: every HTTP request the store sends (SDK calls and the
// raw ranged GETs and HEADs alike, each retry counted) by S3 operation and HTTP
// status, with the time to the response headers.
//
//	os2g_s3_requests_total{op="GetObject",status="206"}
//	os2g_s3_request_duration_seconds{op="GetObject"}   histogram
//	os2g_upload_parts_total                            multipart parts stored (UploadPart 2xx)
//
// status is the HTTP status code, or "error" when no response came
// (refused, reset, timed out).

// requestMetrics holds the collectors of one registry.
type requestMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	parts    prometheus.Counter
}

// newRequestMetrics registers the request metrics with reg, reusing the
// collectors when a store for the same registry registered them before.
func newRequestMetrics(reg prometheus.Registerer) *requestMetrics {
	m := &requestMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "os2g", Subsystem: "s3", Name: "requests_total",
			Help: "HTTP requests sent to the object store, by S3 operation and HTTP status (\"error\": no response)",
		}, []string{"op", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "os2g", Subsystem: "s3", Name: "request_duration_seconds",
			Help:    "time from sending an object store request to its response headers, by S3 operation",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms to 16 s
		}, []string{"op"}),
		parts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "os2g", Name: "upload_parts_total",
			Help: "multipart upload parts stored (UploadPart answered 2xx)",
		}),
	}
	m.requests = register(reg, m.requests)
	m.duration = register(reg, m.duration)
	m.parts = register(reg, m.parts)
	return m
}

// register registers c with reg, or returns the collector already
// registered under the same description.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if old, ok := are.ExistingCollector.(C); ok {
				return old
			}
		}
	}
	return c
}

// instrumentedClient is an aws.HTTPClient that records requestMetrics.
type instrumentedClient struct {
	inner aws.HTTPClient
	m     *requestMetrics
}

func (c instrumentedClient) Do(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := c.inner.Do(req)
	op := requestOp(req)
	status := "error"
	if err == nil && resp != nil {
		status = strconv.Itoa(resp.StatusCode)
		if op == "UploadPart" && resp.StatusCode/100 == 2 {
			c.m.parts.Inc()
		}
	}
	c.m.requests.WithLabelValues(op, status).Inc()
	c.m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	return resp, err
}

// requestOp names the S3 operation of req: the SDK's operation name when
// the request came through the SDK, else (the raw GETs and HEADs) from the
// method and query.
func requestOp(req *http.Request) string {
	if op := awsmiddleware.GetOperationName(req.Context()); op != "" {
		return op
	}
	q := req.URL.Query()
	switch req.Method {
	case http.MethodGet:
		if q.Has("list-type") {
			return "ListObjectsV2"
		}
		return "GetObject"
	case http.MethodHead:
		return "HeadObject"
	case http.MethodPut:
		if q.Has("partNumber") {
			return "UploadPart"
		}
		return "PutObject"
	case http.MethodPost:
		if q.Has("uploads") {
			return "CreateMultipartUpload"
		}
		if q.Has("uploadId") {
			return "CompleteMultipartUpload"
		}
	case http.MethodDelete:
		if q.Has("uploadId") {
			return "AbortMultipartUpload"
		}
		return "DeleteObject"
	}
	return req.Method
}
