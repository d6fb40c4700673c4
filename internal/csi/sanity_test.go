package csi

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// staticProvisioner stands in, for the sanity suite only, for what a
// cluster administrator does by hand with this driver: writing a
// PersistentVolume. The suite's node tests get their volume from a
// Controller's CreateVolume; this one hands back the attributes of a
// volume on the test's bucket. It is served on its own socket
// (TestConfig.ControllerAddress); the plugin itself offers no Controller.
type staticProvisioner struct {
	csipb.UnimplementedControllerServer
	attrs map[string]string

	mu   sync.Mutex // guards vols
	vols map[string]bool
}

func (p *staticProvisioner) CreateVolume(_ context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	p.mu.Lock()
	p.vols[req.GetName()] = true
	p.mu.Unlock()
	return &csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: req.GetName(), VolumeContext: p.attrs}}, nil
}

func (p *staticProvisioner) DeleteVolume(_ context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	p.mu.Lock()
	delete(p.vols, req.GetVolumeId())
	p.mu.Unlock()
	return &csipb.DeleteVolumeResponse{}, nil
}

// sanitySkips are the suite's specs this driver does not run, each with
// the reason: a substring of the spec's text or of its skip message, and
// why.
var sanitySkips = []struct{ match, why string }{
	{"[Controller Server]", "the plugin offers no Controller service (static provisioning): filtered out with Ginkgo's skip"},
	{"GroupControllerService not supported", "no GroupController service"},
	{"NodeGetVolumeHealth not supported", "no GET_VOLUME_HEALTH (an alpha RPC); a lost daemon shows as an Unavailable error of NodeGetVolumeStats"},
	{"NodeGetStorageHealth not supported", "no GET_STORAGE_HEALTH (an alpha RPC)"},
	{"Controller Service not provided", "the suite's own skip: full-lifecycle node tests need a Controller that provisions"},
	{"NodeStageVolume not supported", "no STAGE_UNSTAGE_VOLUME: the plugin shares the daemon between publishes itself"},
	{"NodeUnstageVolume not supported", "no STAGE_UNSTAGE_VOLUME"},
	{"NodeExpandVolume not supported", "no EXPAND_VOLUME: a bucket has no size"},
}

// TestSanity runs the CSI project's sanity suite (csi-test's sanity
// package) against the plugin's Unix socket, with a real os2g daemon
// mounting a bucket of a real versitygw behind it. Every spec it runs must
// pass; each skipped spec must match a reason of sanitySkips.
func TestSanity(t *testing.T) {
	requireMounts(t)
	h := newHarness(t, os2gBinary(t))
	v := newS3Volume(t, objects)

	ctrlSock := filepath.Join(h.tmp, "ctrl.sock")
	l, err := net.Listen("unix", ctrlSock)
	if err != nil {
		t.Fatal(err)
	}
	ctrl := grpc.NewServer()
	// The suite also asks the controller address for Identity.
	csipb.RegisterIdentityServer(ctrl, h.d)
	csipb.RegisterControllerServer(ctrl, &staticProvisioner{attrs: v.attrs, vols: map[string]bool{}})
	go ctrl.Serve(l)
	t.Cleanup(ctrl.Stop)

	secrets := filepath.Join(h.tmp, "secrets.yaml")
	body := fmt.Sprintf("NodePublishVolumeSecret:\n  %s: %q\n  %s: %q\n",
		SecretAccessKeyID, v.secrets[SecretAccessKeyID], SecretSecretAccessKey, v.secrets[SecretSecretAccessKey])
	if err := os.WriteFile(secrets, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := sanity.NewTestConfig()
	cfg.Address = "unix://" + h.sock
	cfg.ControllerAddress = "unix://" + ctrlSock
	cfg.TargetPath = filepath.Join(h.tmp, "sanity-target")
	cfg.StagingPath = filepath.Join(h.tmp, "sanity-staging")
	cfg.SecretsFile = secrets
	sanity.GinkgoTest(&cfg)

	var report types.Report
	ginkgo.ReportAfterSuite("os2g sanity summary", func(r types.Report) { report = r })
	gomega.RegisterFailHandler(ginkgo.Fail)
	suite, rep := ginkgo.GinkgoConfiguration()
	suite.SkipStrings = []string{regexp.QuoteMeta("[Controller Server]")}
	rep.Succinct = true
	ok := ginkgo.RunSpecs(t, "os2g CSI sanity", suite, rep)
	if !ok {
		t.Errorf("the sanity suite failed (see above)")
	}

	ran, skipped := 0, 0
	for _, s := range report.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt {
			continue
		}
		text := s.FullText()
		switch s.State {
		case types.SpecStatePassed:
			ran++
			t.Logf("passed %q", text)
		case types.SpecStateSkipped:
			skipped++
			why := ""
			for _, sk := range sanitySkips {
				if strings.Contains(text, sk.match) || strings.Contains(s.Failure.Message, sk.match) {
					why = sk.why
					break
				}
			}
			if why == "" {
				t.Errorf("sanity spec skipped without a stated reason: %q (%s)", text, s.Failure.Message)
			} else {
				t.Logf("skipped %q: %s", text, why)
			}
		case types.SpecStatePending:
			skipped++
			t.Logf("not run %q: marked pending in csi-test itself", text)
		default:
			t.Errorf("sanity spec %q: %s", text, s.State)
		}
	}
	t.Logf("sanity: %d specs passed, %d not run (reasons above)", ran, skipped)
	if ran < 10 {
		t.Errorf("only %d sanity specs passed; the suite did not run", ran)
	}
}
