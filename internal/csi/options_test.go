package csi

import (
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestBuildSpec(t *testing.T) {
	src := "s3://bucket/train"
	tests := []struct {
		name     string
		attrs    map[string]string
		flags    []string
		readOnly bool
		want     []string // daemon flags
		wantErr  string   // substring of the error
	}{
		{name: "source only", attrs: map[string]string{"source": src}, want: nil},
		{name: "dataset mode", attrs: map[string]string{"source": src, "datasetMode": "true"},
			want: []string{"--immutable=true", "--read-only=true"}},
		{name: "dataset mode off", attrs: map[string]string{"source": src, "datasetMode": "false"}, want: nil},
		{name: "reader-only access mode", attrs: map[string]string{"source": src}, readOnly: true,
			want: []string{"--read-only=true"}},
		{name: "every pass-through",
			attrs: map[string]string{"source": src, "endpointURL": "http://127.0.0.1:7070", "region": "eu-west-1",
				"forcePathStyle": "1", "maxMemory": "2GiB", "metadataTTL": "10m", "negativeTTL": "0s",
				"cpus": "0-3", "opTimeout": "30s", "sharded": "true", "uid": "1000", "gid": "100",
				"fileMode": "0640", "dirMode": "0750", "partSize": "16MiB", "immutable": "true",
				"csi.storage.k8s.io/pod.name": "trainer-0"},
			want: []string{"--cpus=0-3", "--dir-mode=0750", "--endpoint-url=http://127.0.0.1:7070",
				"--file-mode=0640", "--force-path-style=true", "--gid=100", "--immutable=true",
				"--max-memory=2GiB", "--metadata-ttl=10m", "--negative-ttl=0s", "--op-timeout=30s",
				"--part-size=16MiB", "--region=eu-west-1", "--sharded=true", "--uid=1000"}},
		{name: "mount options", attrs: map[string]string{"source": src},
			flags: []string{"ro", "max-memory=1GiB", "--cpus=2", "sharded"},
			want:  []string{"--cpus=2", "--max-memory=1GiB", "--read-only=true", "--sharded=true"}},
		{name: "attribute and mount option agree", attrs: map[string]string{"source": src, "maxMemory": "1GiB"},
			flags: []string{"max-memory=1GiB"}, want: []string{"--max-memory=1GiB"}},
		{name: "attribute and mount option disagree", attrs: map[string]string{"source": src, "maxMemory": "1GiB"},
			flags: []string{"max-memory=2GiB"}, wantErr: `mount option "max-memory=2GiB" sets --max-memory to "2GiB", but it is already "1GiB"`},
		{name: "read-only false with a reader-only mode", attrs: map[string]string{"source": src, "readOnly": "false"},
			readOnly: true, wantErr: "the access mode is read-only"},
		{name: "no source", attrs: map[string]string{"region": "x"}, wantErr: `volume attribute "source" is required`},
		{name: "bad source", attrs: map[string]string{"source": "bucket/train"}, wantErr: "is not an s3:// URL"},
		{name: "empty bucket", attrs: map[string]string{"source": "s3:///train"}, wantErr: "has no bucket name"},
		{name: "unknown attribute", attrs: map[string]string{"source": src, "maxmemory": "1G"}, wantErr: `unknown volume attribute "maxmemory"`},
		{name: "bad bool", attrs: map[string]string{"source": src, "sharded": "yes"}, wantErr: `volume attribute "sharded": "yes" is not true or false`},
		{name: "bad duration", attrs: map[string]string{"source": src, "metadataTTL": "10"}, wantErr: `volume attribute "metadataTTL"`},
		{name: "negative duration", attrs: map[string]string{"source": src, "opTimeout": "-1s"}, wantErr: `volume attribute "opTimeout"`},
		{name: "bad uid", attrs: map[string]string{"source": src, "uid": "-1"}, wantErr: `volume attribute "uid"`},
		{name: "bad mode", attrs: map[string]string{"source": src, "fileMode": "0986"}, wantErr: `volume attribute "fileMode"`},
		{name: "newline in value", attrs: map[string]string{"source": src, "region": "a\nb"}, wantErr: `volume attribute "region"`},
		{name: "unknown mount option", attrs: map[string]string{"source": src}, flags: []string{"noatime"}, wantErr: `unknown mount option "noatime"`},
		{name: "mount option without value", attrs: map[string]string{"source": src}, flags: []string{"max-memory"}, wantErr: "needs a value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := buildSpec(tc.attrs, tc.flags, tc.readOnly)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.source != tc.attrs["source"] {
				t.Errorf("source %q, want %q", s.source, tc.attrs["source"])
			}
			if !reflect.DeepEqual(s.flags, tc.want) {
				t.Errorf("flags\n got %q\nwant %q", s.flags, tc.want)
			}
		})
	}
}

// TestOptionTableUnique: every attribute and flag appears once, so a
// lookup by either is unambiguous.
func TestOptionTableUnique(t *testing.T) {
	attrs, flags := map[string]bool{AttrSource: true, attrDatasetMode: true}, map[string]bool{}
	for _, o := range options {
		if attrs[o.attr] || flags[o.flag] {
			t.Errorf("duplicate row %+v", o)
		}
		attrs[o.attr], flags[o.flag] = true, true
	}
}

func TestCredentialEnv(t *testing.T) {
	env, err := credentialEnv(map[string]string{SecretAccessKeyID: "AKID", SecretSecretAccessKey: "SECRET", SecretSessionToken: "TOK"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"AWS_ACCESS_KEY_ID=AKID", "AWS_SECRET_ACCESS_KEY=SECRET", "AWS_SESSION_TOKEN=TOK"}
	if !reflect.DeepEqual(env, want) {
		t.Errorf("env %q, want %q", env, want)
	}
	if env, err := credentialEnv(nil); err != nil || env != nil {
		t.Errorf("no secret: %q, %v; want nil, nil", env, err)
	}
	for _, bad := range []map[string]string{
		{SecretAccessKeyID: "akid-value"},
		{SecretAccessKeyID: "akid-value", SecretSecretAccessKey: "s3cr3t-value", "password": "hunter2"},
	} {
		_, err := credentialEnv(bad)
		if err == nil {
			t.Errorf("credentialEnv(%v keys) succeeded", len(bad))
			continue
		}
		for _, v := range bad {
			if strings.Contains(err.Error(), v) {
				t.Errorf("error %q shows a secret value", err)
			}
		}
	}

	base := []string{"PATH=/bin", "AWS_ACCESS_KEY_ID=plugin", "AWS_PROFILE=node", "AWS_REGION=x"}
	got := daemonEnv(base, want)
	if slices.Contains(got, "AWS_ACCESS_KEY_ID=plugin") || slices.Contains(got, "AWS_PROFILE=node") {
		t.Errorf("daemon env %q keeps the plugin's credentials", got)
	}
	if !slices.Contains(got, "PATH=/bin") || !slices.Contains(got, "AWS_REGION=x") || !slices.Contains(got, "AWS_SECRET_ACCESS_KEY=SECRET") {
		t.Errorf("daemon env %q", got)
	}
	if got := daemonEnv(base, nil); !reflect.DeepEqual(got, base) {
		t.Errorf("daemon env without a secret %q, want the plugin's %q", got, base)
	}
}

// TestInvalidRequests: requests the spec calls invalid fail with
// InvalidArgument before anything is started (the os2g binary here is
// /bin/false: nothing may run it).
func TestInvalidRequests(t *testing.T) {
	h := newHarness(t, "/bin/false")
	target := h.target("pod")
	good := map[string]string{"source": "s3://b/p"}
	cap := mountCap(csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)
	block := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	tests := []struct {
		name string
		req  *csipb.NodePublishVolumeRequest
		want string
	}{
		{"no volume ID", &csipb.NodePublishVolumeRequest{TargetPath: target, VolumeCapability: cap, VolumeContext: good}, "volume ID missing"},
		{"no target", &csipb.NodePublishVolumeRequest{VolumeId: "v", VolumeCapability: cap, VolumeContext: good}, "target path missing"},
		{"relative target", &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: "rel/x", VolumeCapability: cap, VolumeContext: good}, "not absolute"},
		{"no capability", &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeContext: good}, "capability missing"},
		{"block", &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeCapability: block, VolumeContext: good}, "block access"},
		{"no source", &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeCapability: cap}, `"source" is required`},
		{"unknown attribute", &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeCapability: cap,
			VolumeContext: map[string]string{"source": "s3://b/p", "color": "red"}}, `unknown volume attribute "color"`},
		{"half a secret", &csipb.NodePublishVolumeRequest{VolumeId: "v", TargetPath: target, VolumeCapability: cap, VolumeContext: good,
			Secrets: map[string]string{SecretAccessKeyID: "AKID"}}, "must hold both"},
	}
	for _, tc := range tests {
		_, err := h.node.NodePublishVolume(h.ctx(), tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want InvalidArgument containing %q", tc.name, err, tc.want)
		}
	}
	for _, req := range []*csipb.NodeUnpublishVolumeRequest{{TargetPath: target}, {VolumeId: "v"}} {
		if _, err := h.node.NodeUnpublishVolume(h.ctx(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("NodeUnpublishVolume(%v): %v, want InvalidArgument", req, err)
		}
	}
	// Unpublish of a target that never existed succeeds.
	if _, err := h.node.NodeUnpublishVolume(h.ctx(), &csipb.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: target}); err != nil {
		t.Errorf("unpublish of a missing target: %v", err)
	}
	info, err := h.id.GetPluginInfo(h.ctx(), &csipb.GetPluginInfoRequest{})
	if err != nil || info.GetName() != DefaultDriverName {
		t.Errorf("GetPluginInfo: %v, %v", info, err)
	}
	ni, err := h.node.NodeGetInfo(h.ctx(), &csipb.NodeGetInfoRequest{})
	if err != nil || ni.GetNodeId() != "node-1" {
		t.Errorf("NodeGetInfo: %v, %v", ni, err)
	}
}

// TestOptionTableFlagsExist: every row of the option table (and the fixed
// flags every daemon gets) names a real flag of the os2g binary's
// "mount --help".
func TestOptionTableFlagsExist(t *testing.T) {
	out, err := exec.Command(os2gBinary(t), "mount", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("os2g mount --help: %v\n%s", err, out)
	}
	help := string(out)
	names := []string{"foreground", "allow-other"}
	for _, o := range options {
		names = append(names, o.flag)
	}
	for _, name := range names {
		re := regexp.MustCompile(`(?m)(^|\s)--?` + regexp.QuoteMeta(name) + `(\s|=|,|$)`)
		if !re.MatchString(help) {
			t.Errorf("option table row --%s is not a flag of os2g mount", name)
		}
	}
}
