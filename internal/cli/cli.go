// Package cli implements the os2g command: flag parsing (cobra and pflag),
// validation, wiring of the layers (objclient -> prefetch -> fusefs),
// daemonisation with a readiness pipe, signal handling and clean unmount,
// and the upload, warm and stats helpers.
//
// Every command returns an exit status instead of calling os.Exit, writes its
// diagnostics as one line "os2g: COMMAND: message" to Env.Stderr, and never
// prints credentials. Exit status 0 is success, 1 a failure of the operation
// and 2 a usage error (bad flag or flag value, wrong number of arguments);
// a usage error names the flag or argument at fault.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Env is the process environment a command runs in. Tests substitute every
// field; cmd/os2g passes the real process's.
type Env struct {
	Args   []string  // command-line arguments without the program name
	Stdout io.Writer // normal output (version, help on request)
	Stderr io.Writer // diagnostics, progress and logs
	// Getenv reads an environment variable (os.Getenv); nil reads nothing.
	Getenv func(string) string
	// Version is the release string set at link time ("v0.3.0"); ""
	// takes the module's build information.
	Version string
	// Commit is the VCS revision set at link time; "" takes the
	// vcs.revision of the build information, if any.
	Commit string
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
  os2g completion bash|zsh|fish                        print a shell completion script
  os2g version, os2g --version                         print the version and commit
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
	if isHelperCall(e.Args) {
		// Called by mount(8) or mount.fuse3 (fstab): translate -o options.
		var m mountFlags
		fs := pflag.NewFlagSet("mount", pflag.ContinueOnError)
		m.register(fs)
		args, fake, err := helperArgs(e.Args, fs)
		if err != nil {
			fmt.Fprintf(e.Stderr, "os2g: mount: %s\n", oneLine(err.Error()))
			return 2
		}
		if fake || helperAlreadyMounted(args) {
			return 0
		}
		e.Args = append([]string{"mount"}, args...)
	}
	root := newRootCmd(e)
	root.SetArgs(e.Args)
	c, err := root.ExecuteContextC(ctx)
	name := ""
	if c != nil && c != root {
		name = c.Name()
	}
	prefix := "os2g: "
	if name != "" {
		prefix += name + ": "
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, pflag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(e.Stderr, "%s%s\n", prefix, oneLine(err.Error()))
		if name != "" {
			fmt.Fprintf(e.Stderr, "Run \"os2g %s --help\" for usage.\n", name)
		} else {
			fmt.Fprintln(e.Stderr, "Run \"os2g help\" for usage.")
		}
		return 2
	case errors.Is(err, errReported):
		return 1
	default:
		fmt.Fprintf(e.Stderr, "%s%s\n", prefix, oneLine(err.Error()))
		return 1
	}
}

// newRootCmd builds the command tree. Every command writes to e's streams;
// flag and argument errors come back as usage errors (exit status 2).
func newRootCmd(e Env) *cobra.Command {
	root := &cobra.Command{
		Use:           "os2g",
		Short:         "mount an S3-compatible bucket as a POSIX directory for deep-learning training",
		Version:       versionString(e.Version, e.Commit),
		SilenceErrors: true,
		SilenceUsage:  true,
		// Unknown commands get their suggestions here (the root's own
		// Args replaces cobra's legacy check).
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q", args[0])
			if sug := c.SuggestionsFor(args[0]); len(sug) > 0 {
				msg += fmt.Sprintf(" (did you mean %q?)", sug[0])
			}
			return usageErr("%s", msg)
		},
		RunE: func(c *cobra.Command, args []string) error {
			return usageErr("no command given")
		},
	}
	root.SetOut(e.Stdout)
	root.SetErr(e.Stderr)
	root.SetIn(strings.NewReader(""))
	root.SetVersionTemplate("os2g {{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	root.SuggestionsMinimumDistance = 2
	defaultHelp := root.HelpFunc()
	root.SetHelpFunc(func(c *cobra.Command, args []string) {
		switch {
		case c == root:
			fmt.Fprint(c.OutOrStdout(), topUsage)
		case strings.HasPrefix(c.Long, "Usage:"):
			printGroupedHelp(c)
		default:
			defaultHelp(c, args)
		}
	})
	root.AddCommand(
		newMountCmd(e),
		newUmountCmd(e),
		newUploadCmd(e),
		newWarmCmd(e),
		newStatsCmd(e),
		&cobra.Command{
			Use:   "version",
			Short: "print the version and commit",
			Args:  noArgs,
			Run: func(c *cobra.Command, args []string) {
				fmt.Fprintf(e.Stdout, "os2g %s\n", root.Version)
			},
		},
	)
	return root
}

// flagError turns a pflag parse error into a usage error; an unknown flag
// gets the closest defined flag as a suggestion.
func flagError(c *cobra.Command, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		if sug := closestFlag(c.Flags(), name); sug != "" {
			msg += fmt.Sprintf(" (did you mean --%s?)", sug)
		}
	}
	return usageErr("%s", msg)
}

// closestFlag returns the defined flag name nearest to name (edit distance
// at most 2, or name a prefix of it), or "".
func closestFlag(fs *pflag.FlagSet, name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := editDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) && len(name) >= 3 {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// noArgs, exactArgs and minArgs check positional arguments, returning
// usage errors that say what was wanted.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErr("takes no arguments; got %q", args)
	}
	return nil
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErr("want %d argument%s, %s; got %d", n, plural(n), what, len(args))
		}
		return nil
	}
}

func minArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) < n {
			return usageErr("want at least %d argument%s, %s", n, plural(n), what)
		}
		return nil
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// flagGroupKey is the pflag annotation that files a flag under a heading
// of the help text.
const flagGroupKey = "os2g_group"

// Flag groups of the help text, in the order flags are defined.
const (
	groupSource  = "Source"
	groupMount   = "Mount"
	groupCaching = "Caching"
	groupMemory  = "Memory"
	groupWrites  = "Writes"
	groupLogging = "Logging and metrics"
	groupGPU     = "GPU direct placement"
)

// flagGroup runs define, which adds flags to fs, and files every flag it
// added under group in the help text.
func flagGroup(fs *pflag.FlagSet, group string, define func()) {
	before := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { before[f.Name] = true })
	define()
	fs.VisitAll(func(f *pflag.Flag) {
		if !before[f.Name] {
			fs.SetAnnotation(f.Name, flagGroupKey, []string{group})
		}
	})
}

// printGroupedHelp prints c.Long and then c's flags under their group
// headings, in definition order; flags of no group come last.
func printGroupedHelp(c *cobra.Command) {
	w := c.OutOrStdout()
	fmt.Fprint(w, c.Long)
	var order []string
	sets := map[string]*pflag.FlagSet{}
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		g := "Other flags"
		if a := f.Annotations[flagGroupKey]; len(a) > 0 {
			g = a[0] + " flags"
		}
		if sets[g] == nil {
			sets[g] = pflag.NewFlagSet(g, pflag.ContinueOnError)
			sets[g].SortFlags = false
			order = append(order, g)
		}
		sets[g].AddFlag(f)
	})
	// Ungrouped flags (help) last.
	for i, g := range order {
		if g == "Other flags" {
			order = append(append(order[:i:i], order[i+1:]...), g)
			break
		}
	}
	for _, g := range order {
		title := g
		if len(order) == 1 {
			title = "Flags"
		}
		fmt.Fprintf(w, "\n%s:\n%s", title, sets[g].FlagUsagesWrapped(100))
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

// versionString renders "VERSION (commit REV) GOVERSION": version and
// commit as stamped at link time, else from the build information
// (module version, vcs.revision and vcs.modified).
func versionString(v, commit string) string {
	v, commit = versionParts(v, commit)
	if commit != "" {
		v += " (commit " + commit + ")"
	}
	return v + " " + runtime.Version()
}

// versionParts returns the version ("(devel)" if unknown) and the commit
// (12 hex digits, "-dirty" for a modified tree; "" if unknown): the
// stamped values, else the build information's.
func versionParts(v, commit string) (string, string) {
	dirty := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		stamped := commit != ""
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && !stamped:
				commit = s.Value
			case s.Key == "vcs.modified" && s.Value == "true" && !stamped:
				dirty = "-dirty"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if commit != "" {
		commit += dirty
	}
	return v, commit
}
