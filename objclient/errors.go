package objclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
)

// normalise turns an SDK error into one wrapping exactly one sentinel (or
// context.Canceled / context.DeadlineExceeded when the caller's context
// ended). It is the only place that looks inside SDK errors.
func normalise(ctx context.Context, op, key string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("objclient: %s %q: %w", op, key, cerr)
	}
	if s := sentinelOf(err); s != nil {
		return fmt.Errorf("objclient: %s %q: %w: %w", op, key, s, err)
	}
	return fmt.Errorf("objclient: %s %q: %w", op, key, err)
}

// Code returns the S3 error code carried by err ("NoSuchKey",
// "InvalidBucketName"), or "" if there is none, for messages that name
// what the server refused.
func Code(err error) string {
	code, _ := apiCode(err)
	return code
}

// apiCode returns the S3 error code ("NoSuchKey") and HTTP status of err, if any.
func apiCode(err error) (code string, status int) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return code, status
}

// isExpiredToken reports whether the server rejected the session token as expired.
func isExpiredToken(err error) bool {
	code, _ := apiCode(err)
	switch code {
	case "ExpiredToken", "ExpiredTokenException", "InvalidToken", "TokenRefreshRequired", "RequestExpired":
		return true
	}
	return false
}

func sentinelOf(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// A deadline of ours (stall timeout) that the caller did not set.
		return ErrUnavailable
	}
	code, status := apiCode(err)
	switch code {
	case "NoSuchKey", "NotFound", "NoSuchUpload":
		return ErrNotFound
	case "NoSuchBucket":
		return ErrNoSuchBucket
	case "PreconditionFailed", "ConditionalRequestConflict":
		return ErrChanged
	case "SlowDown", "Throttling", "ThrottlingException", "TooManyRequests", "RequestLimitExceeded", "RequestThrottled", "ServiceUnavailable":
		return ErrThrottled
	case "AccessDenied", "AllAccessDisabled", "AccountProblem":
		return ErrAccessDenied
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "InvalidSecurity", "TokenRefreshRequired", "RequestExpired", "MissingSecurityHeader", "AuthorizationHeaderMalformed", "XAdminUserNotFound":
		return ErrInvalidCredentials
	case "EntityTooLarge":
		return ErrTooLarge
	case "InvalidArgument", "InvalidRequest", "KeyTooLongError", "InvalidBucketName", "InvalidRange", "MalformedXML", "InvalidPart", "InvalidPartOrder", "EntityTooSmall":
		return ErrInvalidArgument
	case "InternalError", "ServiceFailure":
		return ErrUnavailable
	}
	switch {
	case status == http.StatusNotFound:
		return ErrNotFound
	case status == http.StatusPreconditionFailed:
		return ErrChanged
	case status == http.StatusForbidden:
		return ErrAccessDenied
	case status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests:
		return ErrThrottled
	case status >= 500:
		return ErrUnavailable
	case status == http.StatusBadRequest:
		return ErrInvalidArgument
	}
	var de *smithy.DeserializationError
	if errors.As(err, &de) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, errStalled) {
		// A success status with a body that is not S3's XML: a web
		// server, not S3 (a cut body is io.ErrUnexpectedEOF instead).
		return ErrNotS3
	}
	var ne net.Error // *net.OpError, timeouts, DNS failures
	if errors.As(err, &ne) {
		return ErrUnavailable
	}
	var ce interface{ CanceledError() bool } // smithy canceled
	if errors.As(err, &ce) {
		return ErrUnavailable
	}
	if status == 0 {
		// No HTTP response at all: a transport failure (refused, reset, EOF).
		return ErrUnavailable
	}
	return nil
}
