package cli

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

const umountUsage = `Usage: os2g umount [-z] MOUNTPOINT

Unmounts an os2g (or any FUSE) mount with fusermount3 -u; the daemon serving
it then exits. A mount whose files are still open is busy: close them first,
or pass -z to detach it now and let it go away when the last file closes.
Also clears a stale mount left by a daemon that was killed.
`

func newUmountCmd(e Env) *cobra.Command {
	var lazy bool
	c := &cobra.Command{
		Use:     "umount [-z] MOUNTPOINT",
		Aliases: []string{"unmount"},
		Short:   "unmount (the daemon then exits)",
		Long:    umountUsage,
		Args:    exactArgs(1, "MOUNTPOINT"),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveFilterDirs
		},
		RunE: func(c *cobra.Command, args []string) error {
			return runUmount(c.Context(), args[0], lazy)
		},
	}
	c.Flags().BoolVarP(&lazy, "lazy", "z", false, "lazy: detach now, finish when no longer busy")
	return c
}

func runUmount(ctx context.Context, target string, lazy bool) error {
	mp, err := filepath.Abs(target)
	if err != nil {
		return err
	}
	if !IsMounted(mp) {
		return fmt.Errorf("%s is not mounted", mp)
	}
	argv := []string{"-u"}
	if lazy {
		argv = append(argv, "-z")
	}
	out, err := exec.CommandContext(ctx, fusermountBin(), append(argv, mp)...).CombinedOutput()
	if err == nil {
		return nil
	}
	// Without fusermount (or as root) the plain system call works too.
	flags := 0
	if lazy {
		flags = syscall.MNT_DETACH
	}
	if uerr := syscall.Unmount(mp, flags); uerr == nil {
		return nil
	} else if uerr == syscall.EBUSY {
		return fmt.Errorf("%s is busy (files are open or a process has its working directory there); close them or use: os2g umount -z %s", mp, mp)
	}
	return fmt.Errorf("unmounting %s: %s", mp, oneLine(string(out)))
}
