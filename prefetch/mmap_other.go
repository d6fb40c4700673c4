//go:build !linux

package prefetch

import (
	"errors"
	"os"
)

// mmapSupported says whether MmapAllocator maps memory on this system.
const mmapSupported = false

var errNoMmap = errors.New("prefetch: mmap not supported on this system")

func pageSize() int { return os.Getpagesize() }

func mmapAnon(int) ([]byte, error) { return nil, errNoMmap }
func munmap([]byte) error          { return errNoMmap }
func madviseDontNeed([]byte) error { return errNoMmap }
func populate([]byte) error        { return errNoMmap }
