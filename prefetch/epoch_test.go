package prefetch

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient/objtest"
)

// epochDir stores n files of size bytes under dir.
func epochDir(t testing.TB, mem *objtest.Mem, dir string, n, size int) ([]File, map[string][]byte) {
	t.Helper()
	var files []File
	data := map[string][]byte{}
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("%s%05d.png", dir, i)
		d := randBytes(uint64(1000+i), size)
		data[key] = d
		files = append(files, memFile(t, mem, key, d))
	}
	return files, data
}

// readEpoch reads every file once, whole, in a shuffled order, with
// workers goroutines (like a DataLoader), stopping after limit files.
func readEpoch(t testing.TB, m *Manager, files []File, data map[string][]byte, workers, limit int, seed uint64) {
	t.Helper()
	order := rand.New(rand.NewPCG(seed, seed)).Perm(len(files))[:limit]
	shuffled := make([]File, len(order))
	for i, k := range order {
		shuffled[i] = files[k]
	}
	readList(t, m, shuffled, data, workers)
}

// TestEpochPreRead: after the pattern shows, opens find their bytes
// pre-read, and no file is fetched twice.
func TestEpochPreRead(t *testing.T) {
	mem := objtest.NewMem()
	files, data := epochDir(t, mem, "train/cls/", 200, 16<<10)
	g := newCountGetter(mem, 2*time.Millisecond)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib})
	m.NoteDir("train/cls/", files)
	readEpoch(t, m, files, data, 8, len(files), 1)
	st := m.Stats()
	t.Logf("epoch 1: %d of %d opens hit pre-read files; %d pre-read, %d GETs", st.EpochHitOpens, len(files), st.EpochFiles, g.calls.Load())
	if st.EpochHitOpens < 100 {
		t.Errorf("pre-read hits = %d of %d opens, want >= 100", st.EpochHitOpens, len(files))
	}
	if c := g.calls.Load(); c != int64(len(files)) {
		t.Errorf("GETs = %d, want %d (each file once)", c, len(files))
	}
	// Second epoch: everything is in memory; no GET at all.
	readEpoch(t, m, files, data, 8, len(files), 2)
	if c := g.calls.Load(); c != int64(len(files)) {
		t.Errorf("GETs after epoch 2 = %d, want %d", c, len(files))
	}
}

// TestEpochPreReadBoundedAndStops: pre-reading stays within its share of
// memory (files held until read), and stops when reads stop.
func TestEpochPreReadBoundedAndStops(t *testing.T) {
	mem := objtest.NewMem()
	const size = 16 << 10
	files, data := epochDir(t, mem, "d/", 400, size)
	g := newCountGetter(mem, time.Millisecond)
	const share = 40 * size
	m := newTestManager(t, Options{Getter: g, MaxMemory: 4 * mib, PartSize: 1 * mib, EpochMemory: share, EpochIdle: 50 * time.Millisecond})
	m.NoteDir("d/", files)
	const read = 60
	readEpoch(t, m, files, data, 4, read, 3)
	deadline := time.Now().Add(60 * time.Second)
	for m.Stats().EpochRunning > 0 {
		if time.Now().After(deadline) {
			t.Fatal("pre-reader still running a minute after reads stopped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := m.Stats()
	t.Logf("%d files read, %d pre-read, %d hits", read, st.EpochFiles, st.EpochHitOpens)
	if st.EpochFiles > read+share/size {
		t.Errorf("pre-read %d files; want <= %d read + %d held", st.EpochFiles, read, share/size)
	}
	if st.EpochFiles == 0 || st.EpochHitOpens == 0 {
		t.Errorf("pre-reading never started: %+v", st)
	}
	if st.EpochHeld != 0 {
		t.Errorf("held after stop = %d, want 0 (released to the cache)", st.EpochHeld)
	}
	if c := g.calls.Load(); c > read+share/size {
		t.Errorf("GETs = %d, want <= %d", c, read+share/size)
	}
}

// TestEpochDisabled: EpochTrigger -1 turns pre-reading off.
func TestEpochDisabled(t *testing.T) {
	mem := objtest.NewMem()
	files, data := epochDir(t, mem, "x/", 50, 4096)
	g := newCountGetter(mem, 0)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib, EpochTrigger: -1})
	m.NoteDir("x/", files)
	readEpoch(t, m, files, data, 4, 30, 4)
	if st := m.Stats(); st.EpochFiles != 0 || g.calls.Load() != 30 {
		t.Errorf("pre-read %d files, %d GETs; want 0 and 30", st.EpochFiles, g.calls.Load())
	}
}

// TestEpochState: the pure epoch bookkeeping (streaks, new epochs).
func TestEpochState(t *testing.T) {
	g := wordGetter{size: 1 << 20}
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib, EpochTrigger: 3, EpochIdle: time.Hour})
	var files []File
	for i := 0; i < 4; i++ {
		files = append(files, File{Key: fmt.Sprintf("e/%d", i), Size: 100, ETag: "w"})
	}
	m.NoteDir("e/", files)
	d := m.dirs["e/"]
	m.noteWholeRead(files[0])
	m.noteWholeRead(files[1])
	m.mu.Lock()
	if d.streak != 2 || len(d.read) != 2 || d.epochs != 0 {
		t.Errorf("after 2 reads: streak %d read %d epochs %d", d.streak, len(d.read), d.epochs)
	}
	m.mu.Unlock()
	m.noteWholeRead(files[1]) // read again: new epoch
	m.mu.Lock()
	if d.epochs != 1 || len(d.read) != 1 {
		t.Errorf("after re-read: epochs %d read %d, want 1 and 1", d.epochs, len(d.read))
	}
	m.mu.Unlock()
	for _, f := range []File{files[0], files[2], files[3]} {
		m.noteWholeRead(f)
	}
	m.mu.Lock()
	if d.epochs != 2 || len(d.read) != 0 {
		t.Errorf("after all read: epochs %d read %d, want 2 and 0", d.epochs, len(d.read))
	}
	m.mu.Unlock()
	if dirOf("a/b/c.png") != "a/b/" || dirOf("top") != "" {
		t.Error("dirOf")
	}
}

// TestAddDirFiles: files given page by page, before the whole list,
// each join the directory once; reading all those known so far does not
// end the epoch while the listing is partial; NoteDir then completes it.
func TestAddDirFiles(t *testing.T) {
	g := wordGetter{size: 1 << 20}
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib, EpochTrigger: 100, EpochIdle: time.Hour})
	var files []File
	for i := 0; i < 10; i++ {
		files = append(files, File{Key: fmt.Sprintf("e/%d", i), Size: 100, ETag: "w"})
	}
	m.AddDirFiles("e/", files[:4])
	m.AddDirFiles("e/", files[2:6]) // 2 and 3 again: no duplicates
	d := m.dirs["e/"]
	m.mu.Lock()
	if len(d.files) != 6 || len(d.order) != 6 || !d.partial {
		t.Errorf("after two pages: %d files, order %d, partial %v; want 6, 6, true", len(d.files), len(d.order), d.partial)
	}
	seen := map[int]bool{}
	for _, i := range d.order {
		seen[i] = true
	}
	if len(seen) != 6 {
		t.Errorf("order %v is not a permutation of 6 files", d.order)
	}
	m.mu.Unlock()
	for _, f := range files[:6] {
		m.noteWholeRead(f)
	}
	m.mu.Lock()
	if d.epochs != 0 || len(d.read) != 6 {
		t.Errorf("after reading all 6 known files of a partial list: epochs %d read %d, want 0 and 6", d.epochs, len(d.read))
	}
	m.mu.Unlock()
	m.NoteDir("e/", files)
	m.mu.Lock()
	if d.partial || len(d.files) != 10 {
		t.Errorf("after NoteDir: partial %v, %d files; want false, 10", d.partial, len(d.files))
	}
	m.mu.Unlock()
	for _, f := range files[6:] {
		m.noteWholeRead(f)
	}
	m.mu.Lock()
	if d.epochs != 1 || len(d.read) != 0 {
		t.Errorf("after reading all 10: epochs %d read %d, want 1 and 0", d.epochs, len(d.read))
	}
	m.mu.Unlock()
}

// TestEpochPreReadFromPartialListing: pre-reading starts on the files of
// the first pages while the rest of the directory is still being listed,
// and fetches each file once.
func TestEpochPreReadFromPartialListing(t *testing.T) {
	mem := objtest.NewMem()
	files, data := epochDir(t, mem, "train/cls/", 200, 16<<10)
	g := newCountGetter(mem, 2*time.Millisecond)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib})
	m.AddDirFiles("train/cls/", files[:100])
	readEpoch(t, m, files[:100], data, 8, 100, 1)
	st := m.Stats()
	if st.EpochStarts == 0 || st.EpochHitOpens == 0 {
		t.Errorf("no pre-reading from the first 100 listed files: %+v", st)
	}
	m.AddDirFiles("train/cls/", files[100:])
	m.NoteDir("train/cls/", files)
	readEpoch(t, m, files[100:], data, 8, 100, 2)
	if c := g.calls.Load(); c != int64(len(files)) {
		t.Errorf("GETs = %d, want %d (each file once)", c, len(files))
	}
}
