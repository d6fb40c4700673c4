package prefetch

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient/objtest"
)

// waitFor polls cond under m.mu until it holds (generous timeout: a state
// is awaited, not a time).
func waitFor(t testing.TB, m *Manager, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m.mu.Lock()
		ok := cond()
		m.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestHintExactOrder: a rank hints its share of a directory; every hinted
// file is fetched once, no other file at all (no speculative pre-reading
// of the directory), and pre-reads serve the opens.
func TestHintExactOrder(t *testing.T) {
	mem := objtest.NewMem()
	files, data := epochDir(t, mem, "train/c/", 300, 8<<10)
	g := newCountGetter(mem, time.Millisecond)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib})
	m.NoteDir("train/c/", files)
	var list []File
	var keys []string
	for _, i := range shard(len(files), 2, 1, 3, true) {
		list = append(list, files[i])
		keys = append(keys, files[i].Key)
	}
	st, err := m.Hint("", keys)
	if err != nil || st.Files != len(keys) || st.Unknown != 0 {
		t.Fatalf("Hint = %+v, %v; want %d files", st, err, len(keys))
	}
	readList(t, m, list, data, 4)
	waitPreReadIdle(t, m)
	s := m.Stats()
	t.Logf("fetched/read %.3f, hint files %d, hit opens %d of %d", float64(s.BytesFetched)/float64(s.BytesRead), s.HintFiles, s.EpochHitOpens, len(list))
	if s.BytesFetched != s.BytesRead {
		t.Errorf("fetched %d bytes, read %d: want equal (exactly the hinted files)", s.BytesFetched, s.BytesRead)
	}
	hinted := map[string]bool{}
	for _, k := range keys {
		hinted[k] = true
		if c := g.keyCalls(k); c != 1 {
			t.Errorf("%s fetched %d times, want 1", k, c)
		}
	}
	for _, f := range files {
		if !hinted[f.Key] && g.keyCalls(f.Key) != 0 {
			t.Errorf("%s (not hinted) fetched %d times, want 0", f.Key, g.keyCalls(f.Key))
		}
	}
	if s.HintFiles == 0 || s.Hints != 1 {
		t.Errorf("HintFiles = %d, Hints = %d; want > 0 and 1", s.HintFiles, s.Hints)
	}
	m.mu.Lock()
	done := len(m.hints) == 0
	m.mu.Unlock()
	if !done {
		t.Errorf("hint still held after every hinted file was opened")
	}
	if s.EpochOpened != s.HintFiles || s.EpochUnopened != 0 {
		t.Errorf("opened %d, unopened %d; want %d and 0", s.EpochOpened, s.EpochUnopened, s.HintFiles)
	}
}

// TestHintWindow: the pre-reader stays HintWindow files ahead of the
// reader's place, and moves with the opens.
func TestHintWindow(t *testing.T) {
	mem := objtest.NewMem()
	files, _ := epochDir(t, mem, "d/", 100, 4<<10)
	m := newTestManager(t, Options{Getter: mem, MaxMemory: 64 * mib, HintWindow: 10})
	m.NoteDir("d/", files)
	var keys []string
	for i := len(files) - 1; i >= 0; i-- {
		keys = append(keys, files[i].Key)
	}
	if _, err := m.Hint("", keys); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "10 pre-reads", func() bool { return m.hints[""].next == 10 && m.epochInFlight == 0 })
	if n := m.Stats().HintFiles; n != 10 {
		t.Fatalf("HintFiles = %d with no open, want 10 (the window)", n)
	}
	for i := 0; i < 5; i++ {
		m.Open(files[len(files)-1-i]).Close()
	}
	waitFor(t, m, "15 pre-reads", func() bool { return m.hints[""].next == 15 && m.epochInFlight == 0 })
	if n := m.Stats().HintFiles; n != 15 {
		t.Errorf("HintFiles = %d after 5 opens, want 15", n)
	}
	// A file never opened does not stall the window: after opens up to
	// index 40 that skip 5..9 and 20, the reader's place is 40-5+1.
	for i := 10; i <= 40; i++ {
		if i != 20 {
			m.Open(files[len(files)-1-i]).Close()
		}
	}
	waitFor(t, m, "the window past 40", func() bool { return m.hints[""].next == 46 && m.epochInFlight == 0 })
}

// TestHintStaleAndErrors: a hint is dropped when the reader opens files
// outside it, or opens hinted files again (a new epoch); bad hints fail
// clearly.
func TestHintStaleAndErrors(t *testing.T) {
	mem := objtest.NewMem()
	files, _ := epochDir(t, mem, "d/", 200, 1<<10)
	other, _ := epochDir(t, mem, "e/", 100, 1<<10)
	m := newTestManager(t, Options{Getter: mem, MaxMemory: 64 * mib, HintWindow: 4})
	m.NoteDir("d/", files)
	m.NoteDir("e/", other)
	keys := func(fs []File) []string {
		var k []string
		for _, f := range fs {
			k = append(k, f.Key)
		}
		return k
	}
	if _, err := m.Hint("", []string{"nope/x", "d/missing"}); !errors.Is(err, ErrNoHint) {
		t.Errorf("Hint of unknown keys: err = %v, want ErrNoHint", err)
	}
	st, err := m.Hint("", append(keys(files[:50]), "nope/x", files[0].Key))
	if err != nil || st != (HintStatus{Files: 50, Unknown: 1, Duplicates: 1}) {
		t.Errorf("Hint = %+v, %v; want 50 files, 1 unknown, 1 duplicate", st, err)
	}
	held := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.hints) > 0
	}
	for i := 0; i < hintStrayLimit-1; i++ {
		m.Open(other[i]).Close()
	}
	m.Open(files[0]).Close() // a hinted open resets the strays
	for i := 0; i < hintStrayLimit-1; i++ {
		m.Open(other[i]).Close()
	}
	if !held() {
		t.Fatalf("hint dropped after %d strays with a hinted open among them", hintStrayLimit-1)
	}
	m.Open(other[99]).Close()
	if held() {
		t.Errorf("hint still held after %d stray opens in a row", hintStrayLimit)
	}
	if s := m.Stats(); s.HintsStale != 1 {
		t.Errorf("HintsStale = %d, want 1", s.HintsStale)
	}

	// A new epoch: hinted files opened a second time.
	if _, err := m.Hint("", keys(files[100:200])); err != nil {
		t.Fatal(err)
	}
	for i := 100; i < 110; i++ {
		m.Open(files[i]).Close()
	}
	for i := 100; i < 100+hintRepeatLimit; i++ {
		m.Open(files[i]).Close()
	}
	if held() {
		t.Errorf("hint still held after %d hinted files were opened again", hintRepeatLimit)
	}
	// An empty hint drops the current one.
	if _, err := m.Hint("", keys(files[:10])); err != nil {
		t.Fatal(err)
	}
	if st, err := m.Hint("", nil); err != nil || st.Files != 0 || held() {
		t.Errorf("empty Hint = %+v, %v, held %v; want no hint", st, err, held())
	}
	waitPreReadIdle(t, m)
	m.Close()
	if _, err := m.Hint("", keys(files[:10])); !errors.Is(err, ErrClosed) {
		t.Errorf("Hint after Close: err = %v, want ErrClosed", err)
	}
}

// TestHintStreams: two ranks of one node share a mount, each with its own
// hint; both are followed (each hinted file fetched once, nothing else),
// and one rank's opens are not strays of the other's hint.
func TestHintStreams(t *testing.T) {
	mem := objtest.NewMem()
	files, data := epochDir(t, mem, "train/c/", 400, 4<<10)
	g := newCountGetter(mem, time.Millisecond)
	m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib})
	m.NoteDir("train/c/", files)
	var lists [2][]File
	for r := range lists {
		var keys []string
		for _, i := range shard(len(files), 4, r, 1, true) { // 2 of 4 ranks of the job on this node
			lists[r] = append(lists[r], files[i])
			keys = append(keys, files[i].Key)
		}
		if st, err := m.Hint(fmt.Sprintf("rank%d", r), keys); err != nil || st.Files != 100 {
			t.Fatalf("Hint(rank%d) = %+v, %v", r, st, err)
		}
	}
	// Both ranks read at once, interleaved.
	var both []File
	for i := range lists[0] {
		both = append(both, lists[0][i], lists[1][i])
	}
	readList(t, m, both, data, 4)
	waitPreReadIdle(t, m)
	s := m.Stats()
	t.Logf("fetched/read %.3f, hint files %d, stale %d", float64(s.BytesFetched)/float64(s.BytesRead), s.HintFiles, s.HintsStale)
	if s.BytesFetched != s.BytesRead || s.HintsStale != 0 || s.Hints != 2 {
		t.Errorf("fetched %d, read %d, %d hints, %d stale; want fetched == read, 2 hints, none stale", s.BytesFetched, s.BytesRead, s.Hints, s.HintsStale)
	}
	for _, f := range both {
		if c := g.keyCalls(f.Key); c != 1 {
			t.Errorf("%s fetched %d times, want 1", f.Key, c)
		}
	}
}
