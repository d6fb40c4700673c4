package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/os2g/os2g/objclient"
)

// The mount's bucket check refuses a web server that answers 200 with
// HTML to everything, and says which endpoint is not S3 (issue 14).
func TestCheckBucketRefusesNonS3(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<!DOCTYPE html>\n<html><body>It works!<br></body></html>\n")
	}))
	defer web.Close()
	err := checkBucket(context.Background(), objclient.Options{
		Bucket: "data", Region: "us-east-1", Endpoint: web.URL, ForcePathStyle: true,
		AccessKeyID: "k", SecretAccessKey: "s",
	})
	msg := describeStoreErr(err, "data", web.URL)
	if err == nil || !strings.Contains(msg, web.URL) || !strings.Contains(msg, "not S3") {
		t.Errorf("bucket check of a web server: %q (%v), want a message naming %s as not S3", msg, err, web.URL)
	}
}
