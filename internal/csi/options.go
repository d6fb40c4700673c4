package csi

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// AttrSource is the one required volume attribute: the bucket and optional
// key prefix to mount, "s3://BUCKET[/PREFIX]".
const AttrSource = "source"

// valueKind says how an attribute's value is checked before it reaches the
// daemon's command line. The daemon validates every value again; the check
// here only turns an obvious mistake into InvalidArgument naming the
// attribute instead of a failed mount.
type valueKind int

const (
	kindString   valueKind = iota // any non-empty string without newlines
	kindBool                      // strconv.ParseBool
	kindDuration                  // time.ParseDuration, not negative
	kindUint                      // decimal, fits 32 bits
	kindOctal                     // permission bits, e.g. 0644
)

// option maps one volume attribute (PersistentVolume
// spec.csi.volumeAttributes) and one mount option (spec.mountOptions) to a
// flag of "os2g mount".
type option struct {
	attr string    // key in volumeAttributes, camelCase
	flag string    // flag of os2g mount, without "--"; also the mountOptions name
	kind valueKind // how the value is checked
}

// options is THE table of what a volume may set. Each row is one flag of
// "os2g mount"; a volume attribute or mount option that is not here is
// refused. "source" (the s3:// URL), "datasetMode" (--read-only and
// --immutable together) and the fixed flags of every daemon
// (--foreground, --allow-other) are handled apart, see daemonArgs.
var options = []option{
	{"endpointURL", "endpoint-url", kindString},
	{"region", "region", kindString},
	{"forcePathStyle", "force-path-style", kindBool},
	{"readOnly", "read-only", kindBool},
	{"immutable", "immutable", kindBool},
	{"maxMemory", "max-memory", kindString},
	{"partSize", "part-size", kindString},
	{"metadataTTL", "metadata-ttl", kindDuration},
	{"negativeTTL", "negative-ttl", kindDuration},
	{"uid", "uid", kindUint},
	{"gid", "gid", kindUint},
	{"fileMode", "file-mode", kindOctal},
	{"dirMode", "dir-mode", kindOctal},
	{"cpus", "cpus", kindString},              // CPU list of the daemon's threads, e.g. 0-3
	{"opTimeout", "op-timeout", kindDuration}, // per-request deadline
	{"sharded", "sharded", kindBool},          // this node reads a share of the data set
	{"debug", "debug", kindBool},
}

// attrDatasetMode turns on --read-only and --immutable: the dataset mode of
// README ("Dataset mode").
const attrDatasetMode = "datasetMode"

// mountSpec is what a publish asks of the volume's daemon.
type mountSpec struct {
	source string   // s3://BUCKET[/PREFIX]
	flags  []string // os2g mount flags, sorted by name, each "--name=value"
}

// key identifies the daemon configuration: two publishes of one volume
// share a daemon only if their keys are equal.
func (s mountSpec) key() string { return s.source + "\x00" + strings.Join(s.flags, "\x00") }

// readOnly reports whether the daemon is started with --read-only.
func (s mountSpec) readOnly() bool {
	for _, f := range s.flags {
		if f == "--read-only=true" {
			return true
		}
	}
	return false
}

// buildSpec turns a volume's attributes, the capability's mount flags and
// the access mode's read-only-ness into the daemon's flags. Errors name the
// offending attribute or mount option (never a secret: secrets do not come
// here).
func buildSpec(attrs map[string]string, mountFlags []string, readOnlyMode bool) (mountSpec, error) {
	var s mountSpec
	src, ok := attrs[AttrSource]
	if !ok || src == "" {
		return s, fmt.Errorf("volume attribute %q is required (s3://BUCKET[/PREFIX])", AttrSource)
	}
	if err := checkSource(src); err != nil {
		return s, fmt.Errorf("volume attribute %q: %w", AttrSource, err)
	}
	s.source = src
	vals := map[string]string{} // flag name -> value
	set := func(flag, value, from string) error {
		if old, ok := vals[flag]; ok && old != value {
			return fmt.Errorf("%s sets --%s to %q, but it is already %q", from, flag, value, old)
		}
		vals[flag] = value
		return nil
	}
	byAttr := map[string]option{}
	byFlag := map[string]option{}
	for _, o := range options {
		byAttr[o.attr] = o
		byFlag[o.flag] = o
	}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := attrs[k]
		switch k {
		case AttrSource:
			continue
		case attrDatasetMode:
			on, err := strconv.ParseBool(v)
			if err != nil {
				return s, fmt.Errorf("volume attribute %q: %q is not true or false", k, v)
			}
			if on {
				if err := set("read-only", "true", fmt.Sprintf("volume attribute %q", k)); err != nil {
					return s, err
				}
				if err := set("immutable", "true", fmt.Sprintf("volume attribute %q", k)); err != nil {
					return s, err
				}
			}
			continue
		}
		if strings.HasPrefix(k, "csi.storage.k8s.io/") {
			continue // pod information the CO may add (podInfoOnMount); not ours
		}
		o, ok := byAttr[k]
		if !ok {
			return s, fmt.Errorf("unknown volume attribute %q (known: %s)", k, knownAttrs())
		}
		nv, err := checkValue(o.kind, v)
		if err != nil {
			return s, fmt.Errorf("volume attribute %q: %w", k, err)
		}
		if err := set(o.flag, nv, fmt.Sprintf("volume attribute %q", k)); err != nil {
			return s, err
		}
	}
	for _, mf := range mountFlags {
		name, v, hasValue := strings.Cut(strings.TrimPrefix(mf, "--"), "=")
		if name == "ro" && !hasValue {
			name = "read-only"
		}
		o, ok := byFlag[name]
		if !ok {
			return s, fmt.Errorf("unknown mount option %q (known: ro, %s)", mf, knownFlags())
		}
		if !hasValue {
			if o.kind != kindBool {
				return s, fmt.Errorf("mount option %q needs a value (%s=VALUE)", mf, name)
			}
			v = "true"
		}
		nv, err := checkValue(o.kind, v)
		if err != nil {
			return s, fmt.Errorf("mount option %q: %w", mf, err)
		}
		if err := set(o.flag, nv, fmt.Sprintf("mount option %q", mf)); err != nil {
			return s, err
		}
	}
	if readOnlyMode {
		if v, ok := vals["read-only"]; ok && v != "true" {
			return s, fmt.Errorf("the access mode is read-only but read-only is set to %q", v)
		}
		vals["read-only"] = "true"
	}
	for name, v := range vals {
		s.flags = append(s.flags, "--"+name+"="+v)
	}
	sort.Strings(s.flags)
	return s, nil
}

// checkSource checks the form s3://BUCKET[/PREFIX] (the daemon checks the
// bucket name and that the bucket exists).
func checkSource(src string) error {
	rest, ok := strings.CutPrefix(src, "s3://")
	if !ok {
		return fmt.Errorf("%q is not an s3:// URL (want s3://BUCKET[/PREFIX])", src)
	}
	bucket, _, _ := strings.Cut(rest, "/")
	if bucket == "" {
		return fmt.Errorf("%q has no bucket name (want s3://BUCKET[/PREFIX])", src)
	}
	if strings.ContainsAny(src, "\x00\n\r") {
		return fmt.Errorf("%q contains a control character", src)
	}
	return nil
}

// checkValue checks v for kind and returns its canonical form.
func checkValue(kind valueKind, v string) (string, error) {
	switch kind {
	case kindBool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return "", fmt.Errorf("%q is not true or false", v)
		}
		return strconv.FormatBool(b), nil
	case kindDuration:
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return "", fmt.Errorf("%q is not a non-negative duration such as 30s or 5m", v)
		}
		return v, nil
	case kindUint:
		if _, err := strconv.ParseUint(v, 10, 32); err != nil {
			return "", fmt.Errorf("%q is not an unsigned 32-bit number", v)
		}
		return v, nil
	case kindOctal:
		if n, err := strconv.ParseUint(v, 8, 32); err != nil || n > 0o7777 {
			return "", fmt.Errorf("%q is not octal permission bits such as 0644", v)
		}
		return v, nil
	default:
		if v == "" || strings.ContainsAny(v, "\x00\n\r") {
			return "", fmt.Errorf("%q is empty or contains a control character", v)
		}
		return v, nil
	}
}

func knownAttrs() string {
	names := []string{AttrSource, attrDatasetMode}
	for _, o := range options {
		names = append(names, o.attr)
	}
	return strings.Join(names, ", ")
}

func knownFlags() string {
	var names []string
	for _, o := range options {
		names = append(names, o.flag)
	}
	return strings.Join(names, ", ")
}

// Secret keys accepted in the Secret named by nodePublishSecretRef. They are
// the AWS SDK's environment variable names and reach the daemon only as its
// environment: never its command line, never a log line.
const (
	SecretAccessKeyID     = "AWS_ACCESS_KEY_ID"
	SecretSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	SecretSessionToken    = "AWS_SESSION_TOKEN"
)

// credentialEnv checks the publish secrets and returns the environment
// entries ("NAME=value") they give the daemon, or nil when there are none
// (the daemon then uses the plugin's own AWS configuration chain). Errors
// name keys, never values.
func credentialEnv(secrets map[string]string) ([]string, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	for k := range secrets {
		switch k {
		case SecretAccessKeyID, SecretSecretAccessKey, SecretSessionToken:
		default:
			return nil, fmt.Errorf("unknown key %q in the publish secret (known: %s, %s, %s)", k, SecretAccessKeyID, SecretSecretAccessKey, SecretSessionToken)
		}
	}
	if secrets[SecretAccessKeyID] == "" || secrets[SecretSecretAccessKey] == "" {
		return nil, fmt.Errorf("the publish secret must hold both %s and %s", SecretAccessKeyID, SecretSecretAccessKey)
	}
	env := []string{
		SecretAccessKeyID + "=" + secrets[SecretAccessKeyID],
		SecretSecretAccessKey + "=" + secrets[SecretSecretAccessKey],
	}
	if t := secrets[SecretSessionToken]; t != "" {
		env = append(env, SecretSessionToken+"="+t)
	}
	return env, nil
}

// daemonEnv is the daemon's environment: the plugin's, less its AWS
// credential variables when the secret gives credentials, plus creds.
func daemonEnv(base, creds []string) []string {
	env := make([]string, 0, len(base)+len(creds))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if len(creds) > 0 && (name == SecretAccessKeyID || name == SecretSecretAccessKey || name == SecretSessionToken || name == "AWS_PROFILE") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, creds...)
}

// CheckVolume checks a PersistentVolume's spec.csi.volumeAttributes and
// spec.mountOptions the way NodePublishVolume does (readerOnly: the
// access mode allows no writer) and returns the arguments of "os2g mount"
// they give, flags first and the s3:// URL last (the daemon also gets
// --foreground, --allow-other and its mount point). Errors name the
// offending attribute or option.
func CheckVolume(attrs map[string]string, mountOptions []string, readerOnly bool) ([]string, error) {
	s, err := buildSpec(attrs, mountOptions, readerOnly)
	if err != nil {
		return nil, err
	}
	return append(append([]string(nil), s.flags...), s.source), nil
}
