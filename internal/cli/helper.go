package cli

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/os2g/os2g/internal/mountinfo"
)

// Mount helper mode (fstab, mount -t fuse.os2g).
//
// mount(8) runs /sbin/mount.fuse.os2g if installed ("make install" links
// it to os2g), else mount.fuse3, which runs "os2g" from the default PATH
// (or the program before "#" of a "PROGRAM#SOURCE" fstab source). Either
// way os2g is called as
//
//	os2g s3://BUCKET[/PREFIX] MOUNTPOINT [-o OPT[,OPT...]] [-t fuse.os2g] [-n] [-s] [-v] [-f]
//
// and the -o options are translated into "os2g mount" flags: KEY=VALUE is
// --KEY=VALUE and KEY is --KEY, with "_" read as "-" (endpoint_url), for
// every flag of os2g mount; ro is --read-only; the options that only
// mount(8), systemd or the kernel's generic mount flags act on (rw,
// defaults, auto, noauto, user, users, nouser, _netdev, nofail, dev, nodev,
// suid, nosuid, exec, noexec, atime variants, x-*, comment=) are accepted
// and left out. An unknown option is a usage error (exit status 2).

// helperIgnored are the mount options os2g accepts and leaves to mount(8),
// systemd (_netdev, nofail, x-systemd.*: boot ordering and failure
// handling) or FUSE's defaults.
var helperIgnored = map[string]bool{
	"rw": true, "defaults": true, "auto": true, "noauto": true, "user": true, "users": true,
	"nouser": true, "owner": true, "group": true, "_netdev": true, "nofail": true,
	"dev": true, "nodev": true, "suid": true, "nosuid": true, "exec": true, "noexec": true,
	"async": true, "sync": true, "atime": true, "noatime": true, "relatime": true,
	"norelatime": true, "strictatime": true, "lazytime": true, "nolazytime": true,
	"diratime": true, "nodiratime": true, "silent": true, "loud": true,
	"default_permissions": true, // always on
}

// helperRenamed maps FUSE and mount(8) option names to os2g mount flags.
var helperRenamed = map[string]string{
	"ro":          "read-only",
	"allow_other": "allow-other",
}

// isHelperCall reports whether args (without the program name) are a
// mount helper's: the first is the s3:// source.
func isHelperCall(args []string) bool {
	return len(args) > 0 && strings.HasPrefix(args[0], "s3://")
}

// helperArgs translates a mount helper command line (without the program
// name) into "os2g mount" arguments, the flags first. fake is true for
// mount(8)'s -f (do everything but mount). flags are the flags of os2g
// mount, to tell options from typos.
func helperArgs(args []string, flags *pflag.FlagSet) (mountArgs []string, fake bool, err error) {
	var pos, opts []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o" || a == "-t" || a == "-N":
			if i+1 >= len(args) {
				return nil, false, usageErr("%s needs a value", a)
			}
			i++
			switch a {
			case "-o":
				opts = append(opts, args[i])
			case "-t":
				if t := args[i]; t != "fuse.os2g" && t != "os2g" && t != "fuse" {
					return nil, false, usageErr("-t %s: os2g mounts file system type fuse.os2g", t)
				}
			case "-N":
				return nil, false, usageErr("-N (mount in another namespace) is not supported")
			}
		case strings.HasPrefix(a, "-o") && len(a) > 2:
			opts = append(opts, a[2:])
		case a == "-n" || a == "-s" || a == "-v" || a == "-i":
			// no mtab, sloppy, verbose, internal-only: nothing to do
		case a == "-f":
			fake = true
		case strings.HasPrefix(a, "-") && a != "-":
			return nil, false, usageErr("unknown mount helper flag %s", a)
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return nil, false, usageErr("want 2 arguments, s3://BUCKET[/PREFIX] MOUNTPOINT; got %d", len(pos))
	}
	for _, o := range opts {
		for _, kv := range splitOptions(o) {
			k, v, hasV := strings.Cut(kv, "=")
			if helperIgnored[k] || strings.HasPrefix(k, "x-") || k == "comment" || k == "" {
				continue
			}
			name, ok := helperRenamed[k]
			if !ok {
				name = strings.ReplaceAll(k, "_", "-")
			}
			f := flags.Lookup(name)
			if f == nil {
				msg := fmt.Sprintf("-o %s: unknown option", k)
				if sug := closestFlag(flags, name); sug != "" {
					msg += fmt.Sprintf(" (did you mean %s?)", sug)
				}
				return nil, false, usageErr("%s", msg)
			}
			if hasV {
				mountArgs = append(mountArgs, "--"+name+"="+v)
			} else {
				mountArgs = append(mountArgs, "--"+name)
			}
		}
	}
	return append(mountArgs, "--", pos[0], pos[1]), fake, nil
}

// helperAlreadyMounted reports whether the mount point of translated
// helper arguments (the last two are source and mount point) already holds
// an os2g mount of the same source: "mount -a" run twice then succeeds and
// changes nothing, as it does for file systems mount(8) itself recognises.
func helperAlreadyMounted(args []string) bool {
	if len(args) < 2 {
		return false
	}
	u, err := ParseS3URL(args[len(args)-2])
	if err != nil {
		return false
	}
	mp, err := filepath.Abs(args[len(args)-1])
	if err != nil {
		return false
	}
	if r, err := filepath.EvalSymlinks(mp); err == nil {
		mp = r
	}
	m, ok := mountinfo.At(mountinfo.Self(), mp)
	return ok && m.FSType == osFSType && m.Source == u.String()
}

// splitOptions splits a -o list at commas, except inside double quotes
// (mount(8) passes a quoted value on as it is: comment="a,b").
func splitOptions(s string) []string {
	var out []string
	var b strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ',' && !quoted:
			out = append(out, b.String())
			b.Reset()
			continue
		}
		if r != '"' {
			b.WriteRune(r)
		}
	}
	return append(out, b.String())
}
