// Package cli implements the os2g command: flag parsing, validation, wiring
// of the layers (objclient -> prefetch -> fusefs), daemonisation with a
// readiness pipe, signal handling and clean unmount, and the upload helper.
//
// Every command returns an exit status instead of calling os.Exit, writes its
// diagnostics as one line "os2g: COMMAND: message" to Env.Stderr, and never
// prints credentials. Exit status 0 is success, 1 a failure of the operation
// and 2 a usage error (bad flag, wrong number of arguments).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// Env is the process environment a command runs in. Tests substitute every
// field; cmd/os2g passes the real process's.
type Env struct {
	Args   []string  // command-line arguments without the program name
	Stdout io.Writer // normal output (version, help on request)
	Stderr io.Writer // diagnostics, progress and logs
	// Getenv reads an environment variable (os.Getenv); nil reads nothing.
	Getenv func(string) string
	// Version is the release string set at link time; "" takes the
	// module's build information.
	Version string
}

func (e Env) getenv(k string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(k)
}

// errUsage marks an error in the command line; Main exits 2 for it.
var errUsage = errors.New("usage error")

const topUsage = `os2g mounts an S3-compatible bucket as a POSIX directory for deep-learning training.

Usage:
  os2g mount [flags] s3://BUCKET[/PREFIX] MOUNTPOINT   mount a bucket (in the background by default)
  os2g umount [-z] MOUNTPOINT                          unmount (the daemon then exits)
  os2g upload [flags] LOCALDIR s3://BUCKET[/PREFIX]    upload a directory tree with concurrent PUTs
  os2g warm [--concurrency N] PATH...                  read files under a mount into the caches
  os2g stats [--raw] MOUNTPOINT                        show the metrics of a mount's daemon
  os2g version                                         print the version
  os2g help [COMMAND]                                  show help

Credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
AWS_PROFILE or --profile, shared config files, instance roles); the endpoint from
--endpoint-url or AWS_ENDPOINT_URL.
Run "os2g COMMAND --help" for the flags of a command.
`

// Main runs the command named by e.Args[0] and returns the process exit status.
func Main(ctx context.Context, e Env) int {
	if len(e.Args) == 0 {
		fmt.Fprint(e.Stderr, topUsage)
		return 2
	}
	cmd, args := e.Args[0], e.Args[1:]
	var err error
	switch cmd {
	case "mount":
		err = runMount(ctx, e, args)
	case "umount", "unmount":
		err = runUmount(ctx, e, args)
	case "upload":
		err = runUpload(ctx, e, args)
	case "warm":
		err = runWarm(ctx, e, args)
	case "stats":
		err = runStats(ctx, e, args)
	case "version", "--version", "-version":
		fmt.Fprintf(e.Stdout, "os2g %s\n", versionString(e.Version))
		return 0
	case "help", "-h", "-help", "--help":
		if len(args) == 1 && args[0] != "help" {
			return Main(ctx, Env{Args: []string{args[0], "--help"}, Stdout: e.Stdout, Stderr: e.Stdout, Getenv: e.Getenv, Version: e.Version})
		}
		fmt.Fprint(e.Stdout, topUsage)
		return 0
	default:
		fmt.Fprintf(e.Stderr, "os2g: unknown command %q\n\n%s", cmd, topUsage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(e.Stderr, "os2g: %s: %s\n", cmd, oneLine(err.Error()))
		fmt.Fprintf(e.Stderr, "Run \"os2g %s --help\" for usage.\n", cmd)
		return 2
	case errors.Is(err, errReported):
		return 1
	default:
		fmt.Fprintf(e.Stderr, "os2g: %s: %s\n", cmd, oneLine(err.Error()))
		return 1
	}
}

// errReported: the failure was already printed (by a daemon child); exit 1 silently.
var errReported = errors.New("already reported")

// usageErr wraps a message as a usage error (exit status 2).
func usageErr(format string, a ...any) error {
	return fmt.Errorf("%s%w", fmt.Sprintf(format, a...), usageSuffix{})
}

// usageSuffix is an error that prints as nothing and matches errUsage.
type usageSuffix struct{}

func (usageSuffix) Error() string        { return "" }
func (usageSuffix) Is(target error) bool { return target == errUsage }

// oneLine folds an error message onto one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

func versionString(v string) string {
	if v != "" {
		return v
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v = bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v += " (" + rev + dirty + ")"
	}
	return v + " " + bi.GoVersion
}

// parseArgs parses args with fs, allowing flags after positional arguments
// (os2g mount s3://b /mnt --read-only). Everything after "--" is positional.
// On -h/--help it prints header and the flag defaults to e.Stdout and
// returns flag.ErrHelp; a bad flag becomes a usage error. It returns the
// positional arguments in order.
func parseArgs(e Env, fs *flag.FlagSet, header string, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(e.Stdout, header)
		fmt.Fprintln(e.Stdout, "\nFlags:")
		fs.SetOutput(e.Stdout)
		fs.PrintDefaults()
		return nil, flag.ErrHelp
	}
	if err != nil {
		return nil, usageErr("%v", err)
	}
	return pos, nil
}

func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// fs.Parse stops after consuming a "--".
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
