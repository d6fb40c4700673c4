// Package kubernetes_test validates the deployment files of the os2g CSI
// driver without a cluster: every manifest, and the output of
// "kustomize build" of the base and of the example (run in-process with
// sigs.k8s.io/kustomize/api, nothing downloaded), is decoded strictly into
// the Kubernetes API types (k8s.io/api; unknown fields are refused), and
// the objects are checked against each other and against the driver
// (its name, socket paths, volume attributes and secret keys).
package kubernetes_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/os2g/os2g/internal/csi"
)

// kustomization is the part of kustomize's Kustomization these files may
// use; anything else is refused by the strict decoding.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
}

// objects holds decoded manifests by kind.
type objects struct {
	namespaces []corev1.Namespace
	drivers    []storagev1.CSIDriver
	daemonSets []appsv1.DaemonSet
	secrets    []corev1.Secret
	pvs        []corev1.PersistentVolume
	pvcs       []corev1.PersistentVolumeClaim
	pods       []corev1.Pod
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decodeAll strictly decodes every YAML document of data (from where, for
// messages) into the API type of its kind.
func decodeAll(t *testing.T, where string, data []byte, into *objects) {
	t.Helper()
	for i, doc := range docSep.Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s document %d: %v", where, i, err)
		}
		var err error
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Namespace":
			var o corev1.Namespace
			err = yaml.UnmarshalStrict([]byte(doc), &o)
			into.namespaces = append(into.namespaces, o)
		case "storage.k8s.io/v1 CSIDriver":
			var o storagev1.CSIDriver
			err = yaml.UnmarshalStrict([]byte(doc), &o)
			into.drivers = append(into.drivers, o)
		case "apps/v1 DaemonSet":
			var o appsv1.DaemonSet
			err = yaml.UnmarshalStrict([]byte(doc), &o)
			into.daemonSets = append(into.daemonSets, o)
		case "v1 Secret":
			var o corev1.Secret
			err = yaml.UnmarshalStrict([]byte(doc), &o)
			into.secrets = append(into.secrets, o)
		case "v1 PersistentVolume":
			var o corev1.PersistentVolume
			err = yaml.UnmarshalStrict([]byte(doc), &o)
			into.pvs = append(into.pvs, o)
		case "v1 PersistentVolumeClaim":
			var o corev1.PersistentVolumeClaim
			err = yaml.UnmarshalStrict([]byte(doc), &o)
			into.pvcs = append(into.pvcs, o)
		case "v1 Pod":
			var o corev1.Pod
			err = yaml.UnmarshalStrict([]byte(doc), &o)
			into.pods = append(into.pods, o)
		default:
			t.Fatalf("%s document %d: unexpected kind %q %q", where, i, tm.APIVersion, tm.Kind)
		}
		if err != nil {
			t.Errorf("%s document %d (%s): %v", where, i, tm.Kind, err)
		}
	}
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// loadDir decodes dir's kustomization.yaml strictly, checks that each of
// its resources exists, decodes them, and decodes the output of an
// in-process "kustomize build dir". It returns the files' objects and the
// build's objects.
func loadDir(t *testing.T, dir string) (kustomization, objects, objects) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(raw, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("%s/kustomization.yaml: apiVersion/kind %q/%q", dir, k.APIVersion, k.Kind)
	}
	if len(k.Resources) == 0 {
		t.Fatalf("%s/kustomization.yaml lists no resources", dir)
	}
	var files objects
	for _, r := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatalf("%s/kustomization.yaml resource %q: %v", dir, r, err)
		}
		decodeAll(t, filepath.Join(dir, r), data, &files)
	}
	// Every manifest of the directory is a resource of its kustomization.
	all, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range all {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(k.Resources, b) {
			t.Errorf("%s is not listed in %s/kustomization.yaml", f, dir)
		}
	}

	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	var built objects
	decodeAll(t, "kustomize build "+dir, out, &built)
	if n := bytes.Count(out, []byte("\nkind: ")) + btoi(bytes.HasPrefix(out, []byte("kind: "))); n == 0 {
		t.Fatalf("kustomize build %s produced no object", dir)
	}
	return k, files, built
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestBase(t *testing.T) {
	k, files, built := loadDir(t, ".")
	for _, o := range [][2]int{{len(files.drivers), len(built.drivers)}, {len(files.daemonSets), len(built.daemonSets)}} {
		if o[0] != 1 || o[1] != 1 {
			t.Fatalf("want one CSIDriver and one DaemonSet in the files and the build, got %v", o)
		}
	}
	drv := built.drivers[0]
	if drv.Name != csi.DefaultDriverName {
		t.Errorf("CSIDriver name %q, want %q", drv.Name, csi.DefaultDriverName)
	}
	if drv.Spec.AttachRequired == nil || *drv.Spec.AttachRequired {
		t.Error("CSIDriver: attachRequired must be false (the plugin has no Controller)")
	}
	if !slices.Contains(drv.Spec.VolumeLifecycleModes, storagev1.VolumeLifecyclePersistent) {
		t.Error("CSIDriver: volumeLifecycleModes lacks Persistent")
	}

	ds := built.daemonSets[0]
	if ds.Namespace != k.Namespace || k.Namespace == "" {
		t.Errorf("DaemonSet namespace %q, kustomization namespace %q", ds.Namespace, k.Namespace)
	}
	if len(built.namespaces) != 1 || built.namespaces[0].Name != k.Namespace {
		t.Errorf("the base must create its namespace %q", k.Namespace)
	}
	spec := ds.Spec.Template.Spec
	if !labelsMatch(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels) {
		t.Errorf("DaemonSet selector %v does not match the template labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	hostPath := func(name string) string {
		v, ok := vols[name]
		if !ok || v.HostPath == nil {
			t.Fatalf("DaemonSet: volume %q missing or not a hostPath", name)
		}
		return v.HostPath.Path
	}
	pluginDir := "/var/lib/kubelet/plugins/" + csi.DefaultDriverName
	var plugin, registrar *corev1.Container
	for i := range spec.Containers {
		c := &spec.Containers[i]
		for _, m := range c.VolumeMounts {
			if _, ok := vols[m.Name]; !ok {
				t.Errorf("container %s mounts undefined volume %q", c.Name, m.Name)
			}
		}
		switch {
		case slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--kubelet-registration-path=") }):
			registrar = c
		case strings.Contains(c.Image, "os2g-csi"):
			plugin = c
		}
	}
	if plugin == nil || registrar == nil {
		t.Fatalf("DaemonSet needs the os2g-csi container and the node-driver-registrar sidecar")
	}
	if plugin.SecurityContext == nil || plugin.SecurityContext.Privileged == nil || !*plugin.SecurityContext.Privileged {
		t.Error("the os2g-csi container must be privileged")
	}
	mountOf := func(c *corev1.Container, path string) *corev1.VolumeMount {
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].MountPath == path {
				return &c.VolumeMounts[i]
			}
		}
		return nil
	}
	if m := mountOf(plugin, "/dev/fuse"); m == nil || hostPath(m.Name) != "/dev/fuse" {
		t.Error("the os2g-csi container must mount the host's /dev/fuse")
	}
	m := mountOf(plugin, "/var/lib/kubelet/pods")
	if m == nil || hostPath(m.Name) != "/var/lib/kubelet/pods" || m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationBidirectional {
		t.Error("the os2g-csi container must mount /var/lib/kubelet/pods with Bidirectional propagation")
	}
	// The socket: os2g-csi listens on it inside its container, the
	// registrar reaches it inside its own and tells the kubelet its host path.
	if !slices.Contains(plugin.Args, "--endpoint=unix:///csi/csi.sock") {
		t.Errorf("os2g-csi args %q: want --endpoint=unix:///csi/csi.sock", plugin.Args)
	}
	for _, c := range []*corev1.Container{plugin, registrar} {
		if m := mountOf(c, "/csi"); m == nil || hostPath(m.Name) != pluginDir {
			t.Errorf("container %s must mount host %s at /csi", c.Name, pluginDir)
		}
	}
	if !slices.Contains(registrar.Args, "--csi-address=/csi/csi.sock") ||
		!slices.Contains(registrar.Args, "--kubelet-registration-path="+pluginDir+"/csi.sock") {
		t.Errorf("registrar args %q", registrar.Args)
	}
	if m := mountOf(registrar, "/registration"); m == nil || hostPath(m.Name) != "/var/lib/kubelet/plugins_registry" {
		t.Error("the registrar must mount /var/lib/kubelet/plugins_registry at /registration")
	}
	// The image the Dockerfile builds runs os2g-csi with os2g beside it.
	docker, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"./cmd/os2g ", "./cmd/os2g-csi", "/usr/local/bin/os2g-csi", "TARGETARCH"} {
		if !strings.Contains(string(docker), want) {
			t.Errorf("deploy/Dockerfile lacks %q", want)
		}
	}
	if !slices.Contains(plugin.Args, "--os2g=/usr/local/bin/os2g") {
		t.Errorf("os2g-csi args %q: want --os2g=/usr/local/bin/os2g (where the Dockerfile puts it)", plugin.Args)
	}
	for _, dir := range []string{"../../cmd/os2g", "../../cmd/os2g-csi"} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("the Dockerfile builds %s: %v", dir, err)
		}
	}
}

func labelsMatch(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestExamples(t *testing.T) {
	_, files, built := loadDir(t, "examples")
	if len(files.pvs) != len(built.pvs) || len(built.pvs) == 0 || len(built.pods) == 0 {
		t.Fatalf("examples: %d PVs in files, %d built, %d pods", len(files.pvs), len(built.pvs), len(built.pods))
	}
	secrets := map[string]corev1.Secret{}
	for _, s := range built.secrets {
		secrets[s.Namespace+"/"+s.Name] = s
		known := []string{csi.SecretAccessKeyID, csi.SecretSecretAccessKey, csi.SecretSessionToken}
		for k := range s.StringData {
			if !slices.Contains(known, k) {
				t.Errorf("secret %s: key %q is not one the driver reads (%q)", s.Name, k, known)
			}
		}
		if s.StringData[csi.SecretAccessKeyID] == "" || s.StringData[csi.SecretSecretAccessKey] == "" {
			t.Errorf("secret %s needs %s and %s", s.Name, csi.SecretAccessKeyID, csi.SecretSecretAccessKey)
		}
	}
	pvs := map[string]corev1.PersistentVolume{}
	for _, pv := range built.pvs {
		pvs[pv.Name] = pv
		c := pv.Spec.CSI
		if c == nil || c.Driver != csi.DefaultDriverName {
			t.Errorf("PV %s: csi.driver must be %s", pv.Name, csi.DefaultDriverName)
			continue
		}
		readerOnly := len(pv.Spec.AccessModes) > 0 && !slices.ContainsFunc(pv.Spec.AccessModes, func(m corev1.PersistentVolumeAccessMode) bool {
			return m != corev1.ReadOnlyMany
		})
		args, err := csi.CheckVolume(c.VolumeAttributes, pv.Spec.MountOptions, readerOnly)
		if err != nil {
			t.Errorf("PV %s: %v", pv.Name, err)
		}
		t.Logf("PV %s -> os2g mount %s", pv.Name, strings.Join(args, " "))
		if ref := c.NodePublishSecretRef; ref != nil {
			if _, ok := secrets[ref.Namespace+"/"+ref.Name]; !ok {
				t.Errorf("PV %s: nodePublishSecretRef %s/%s is not among the example's secrets", pv.Name, ref.Namespace, ref.Name)
			}
		}
	}
	if args, _ := csi.CheckVolume(pvs["imagenet-train"].Spec.CSI.VolumeAttributes, pvs["imagenet-train"].Spec.MountOptions, true); !slices.Contains(args, "--immutable=true") || !slices.Contains(args, "--read-only=true") {
		t.Errorf("the training data PV should be in dataset mode, gives %q", args)
	}
	claims := map[string]corev1.PersistentVolumeClaim{}
	for _, c := range built.pvcs {
		claims[c.Namespace+"/"+c.Name] = c
		pv, ok := pvs[c.Spec.VolumeName]
		if !ok {
			t.Errorf("PVC %s: volumeName %q is not an example PV", c.Name, c.Spec.VolumeName)
			continue
		}
		if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name != c.Name || pv.Spec.ClaimRef.Namespace != c.Namespace {
			t.Errorf("PV %s is not reserved for PVC %s/%s", pv.Name, c.Namespace, c.Name)
		}
		if c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != "" {
			t.Errorf("PVC %s: storageClassName must be \"\" (static provisioning)", c.Name)
		}
	}
	for _, p := range built.pods {
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			if _, ok := claims[p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName]; !ok {
				t.Errorf("pod %s: claim %q is not an example PVC", p.Name, v.PersistentVolumeClaim.ClaimName)
			}
		}
	}
}

// TestStrictDecoding: the decoding these checks rely on refuses a
// misspelt field, in an API object and in a kustomization.
func TestStrictDecoding(t *testing.T) {
	var ds appsv1.DaemonSet
	err := yaml.UnmarshalStrict([]byte("apiVersion: apps/v1\nkind: DaemonSet\nspec:\n  template:\n    spec:\n      hostNetwrk: true\n"), &ds)
	if err == nil || !strings.Contains(err.Error(), "hostNetwrk") {
		t.Errorf("misspelt DaemonSet field: %v, want an error naming it", err)
	}
	var k kustomization
	err = yaml.UnmarshalStrict([]byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource:\n  - a.yaml\n"), &k)
	if err == nil || !strings.Contains(err.Error(), "resource") {
		t.Errorf("misspelt kustomization field: %v, want an error naming it", err)
	}
}
