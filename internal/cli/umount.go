package cli

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
)

const umountUsage = `Usage: os2g umount [-z] MOUNTPOINT

Unmounts an os2g (or any FUSE) mount with fusermount3 -u; the daemon serving
it then exits. A mount whose files are still open is busy: close them first,
or pass -z to detach it now and let it go away when the last file closes.
Also clears a stale mount left by a daemon that was killed.
`

func runUmount(ctx context.Context, e Env, args []string) error {
	fs := flag.NewFlagSet("umount", flag.ContinueOnError)
	lazy := fs.Bool("z", false, "lazy: detach now, finish when no longer busy")
	pos, err := parseArgs(e, fs, umountUsage, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want 1 argument, MOUNTPOINT; got %d", len(pos))
	}
	mp, err := filepath.Abs(pos[0])
	if err != nil {
		return err
	}
	if !IsMounted(mp) {
		return fmt.Errorf("%s is not mounted", mp)
	}
	argv := []string{"-u"}
	if *lazy {
		argv = append(argv, "-z")
	}
	out, err := exec.CommandContext(ctx, fusermountBin(), append(argv, mp)...).CombinedOutput()
	if err == nil {
		return nil
	}
	// Without fusermount (or as root) the plain system call works too.
	flags := 0
	if *lazy {
		flags = syscall.MNT_DETACH
	}
	if uerr := syscall.Unmount(mp, flags); uerr == nil {
		return nil
	} else if uerr == syscall.EBUSY {
		return fmt.Errorf("%s is busy (files are open or a process has its working directory there); close them or use: os2g umount -z %s", mp, mp)
	}
	return fmt.Errorf("unmounting %s: %s", mp, oneLine(string(out)))
}
