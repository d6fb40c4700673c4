package prefetch

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/os2g/os2g/objclient/objtest"
)

// simEpochs drives a usefulness controller through epochs of a directory
// of n files of size bytes, as the pre-reader and a reader would: shares
// gives the files (indices) read in each epoch, in order; before each
// open the pre-reader issues every candidate the controller allows, up to
// ahead files issued and not yet read (the budget). It returns per epoch
// the bytes wasted (pre-read, never read) and the opens that found their
// file pre-read.
func simEpochs(u *usefulness, n int, size int64, ahead int, shares [][]int, seed uint64) (wasted []int64, hits []int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	key := func(i int) string { return fmt.Sprintf("d/%05d", i) }
	for _, share := range shares {
		read := map[string]bool{}
		issued := map[string]bool{}
		order := rng.Perm(n)
		rankOf := func(i int) int { return u.rank(key(i)) }
		if !u.all() {
			// As dirState.shuffle: predicted files first.
			var first, rest []int
			for _, i := range order {
				if rankOf(i) == 0 {
					first = append(first, i)
				} else {
					rest = append(rest, i)
				}
			}
			order = append(first, rest...)
		}
		pos, h := 0, 0
		outstanding := 0
		for _, i := range share {
			for pos < len(order) && outstanding < ahead {
				k := key(order[pos])
				if read[k] || issued[k] {
					pos++
					continue
				}
				f := File{Key: k, Size: size}
				if !u.allow(f, n) {
					break
				}
				u.onIssue(f)
				issued[k] = true
				outstanding++
				pos++
			}
			k := key(i)
			if issued[k] {
				h++
				outstanding--
			}
			read[k] = true
			u.onRead(k, size)
		}
		hits = append(hits, h)
		before := u.totWasted
		u.endEpoch(n, read)
		wasted = append(wasted, u.totWasted-before)
	}
	return wasted, hits
}

// shard returns rank's files of a DistributedSampler(num_replicas=ranks)
// epoch over n files: a permutation seeded by epoch (shuffle) or the
// identity (no shuffle), every ranks-th index from rank.
func shard(n, ranks, rank, epoch int, shuffle bool) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	if shuffle {
		idx = rand.New(rand.NewPCG(uint64(epoch), 99)).Perm(n)
	}
	var out []int
	for i := rank; i < n; i += ranks {
		out = append(out, idx[i])
	}
	rand.New(rand.NewPCG(uint64(epoch), 5)).Shuffle(len(out), func(a, b int) { out[a], out[b] = out[b], out[a] })
	return out
}

// TestUsefulnessController: table of access patterns, each run for four
// epochs; per epoch the wasted bytes and pre-read hits are checked against
// what the controller promises (useful.go).
func TestUsefulnessController(t *testing.T) {
	const n, size, ahead = 1000, 10_000, 1000
	type want struct {
		maxWaste  float64 // wasted/read bytes, per epoch from the second
		coldWaste float64 // at least this in the first epoch (what it cannot avoid)
		minHits   float64 // hit fraction of opens from the second epoch
	}
	tests := []struct {
		name    string
		sharded bool
		ranks   int
		shuffle bool
		want    want
	}{
		// One node reading everything: every pre-read is used, and every
		// epoch is pre-read in full.
		{"single node", false, 1, true, want{maxWaste: 0, minHits: 0.9}},
		// Two and four DistributedSampler ranks, reshuffled each epoch: the
		// cold epoch pre-reads what the other ranks read (it cannot tell),
		// later epochs stay under the target.
		{"2 ranks shuffled", false, 2, true, want{maxWaste: WasteTarget, coldWaste: 0.9}},
		{"4 ranks shuffled", false, 4, true, want{maxWaste: WasteTarget, coldWaste: 2.7}},
		// A stable share (shuffle=False): the last epoch predicts this one.
		{"2 ranks stable share", false, 2, false, want{maxWaste: WasteTarget, coldWaste: 0.9, minHits: 0.8}},
		// --sharded: no speculation in the cold epoch either.
		{"2 ranks shuffled, --sharded", true, 2, true, want{maxWaste: WasteTarget}},
		{"4 ranks stable share, --sharded", true, 4, false, want{maxWaste: WasteTarget, minHits: 0.8}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := newUsefulness(tc.sharded)
			var shares [][]int
			for e := 0; e < 4; e++ {
				shares = append(shares, shard(n, tc.ranks, 0, e, tc.shuffle))
			}
			wasted, hits := simEpochs(&u, n, size, ahead, shares, 1)
			for e := range shares {
				read := float64(len(shares[e]) * size)
				ratio := float64(wasted[e]) / read
				hitFrac := float64(hits[e]) / float64(len(shares[e]))
				t.Logf("epoch %d: wasted/read %.3f, hits %.2f", e, ratio, hitFrac)
				if e == 0 {
					if tc.sharded && wasted[e] > int64(WasteTarget*read) {
						t.Errorf("--sharded cold epoch wasted/read = %.3f, want <= %.2f", ratio, WasteTarget)
					}
					if ratio < tc.want.coldWaste-0.05 {
						t.Errorf("cold epoch wasted/read = %.3f, want about %.2f (the cold epoch cannot tell a rank from a single node)", ratio, tc.want.coldWaste)
					}
					continue
				}
				if ratio > tc.want.maxWaste {
					t.Errorf("epoch %d: wasted/read = %.3f, want <= %.2f", e, ratio, tc.want.maxWaste)
				}
				if hitFrac < tc.want.minHits {
					t.Errorf("epoch %d: hits = %.2f of opens, want >= %.2f", e, hitFrac, tc.want.minHits)
				}
			}
		})
	}
}

// TestUsefulnessRecovers: a node that read a share and then reads the
// whole directory again gets full pre-reading back after one epoch; a
// node that read everything and then becomes a rank stops wasting after
// one epoch.
func TestUsefulnessRecovers(t *testing.T) {
	const n, size = 400, 1000
	u := newUsefulness(false)
	all := rand.New(rand.NewPCG(3, 3)).Perm(n)
	shares := [][]int{all, shard(n, 2, 1, 1, true), shard(n, 2, 1, 2, true), all, all}
	wasted, hits := simEpochs(&u, n, size, n, shares, 2)
	t.Logf("wasted %v, hits %v", wasted, hits)
	if wasted[0] != 0 {
		t.Errorf("epoch 0 (single node) wasted %d bytes, want 0", wasted[0])
	}
	if r := float64(wasted[1]) / float64(len(shares[1])*size); r < 0.5 {
		t.Errorf("epoch 1 (first epoch as a rank) wasted/read = %.2f, want about 1 (it presumes a single node)", r)
	}
	if r := float64(wasted[2]) / float64(len(shares[2])*size); r > WasteTarget {
		t.Errorf("epoch 2 (rank again) wasted/read = %.3f, want <= %.2f", r, WasteTarget)
	}
	// Epoch 3 reads everything while the controller still expects a
	// share: it holds back, and learns; epoch 4 is pre-read in full again.
	if !u.all() {
		t.Errorf("after a whole-directory epoch the controller does not expect the whole directory")
	}
	if hits[4] < n*9/10 {
		t.Errorf("epoch 4: %d of %d opens hit, want >= %d", hits[4], n, n*9/10)
	}
}

// TestUsefulnessLost: pre-reads dropped unread (a tight budget) count as
// waste at once and hold back further pre-reads; an epoch over the target
// halves the next epoch's allowance.
func TestUsefulnessLost(t *testing.T) {
	u := newUsefulness(true)
	u.finished, u.share = 1, 0.5
	for i := 0; i < 100; i++ {
		u.onRead(fmt.Sprintf("d/r%d", i), 1000)
	}
	f := File{Key: "d/x", Size: 1000}
	if !u.allow(f, 400) {
		t.Fatalf("allow refused with 100 kB read and nothing outstanding")
	}
	for i := 0; i < 12; i++ {
		k := fmt.Sprintf("d/p%d", i)
		u.onIssue(File{Key: k, Size: 1000})
		u.onLost(k)
	}
	if u.realised != 12000 {
		t.Errorf("realised waste = %d, want 12000", u.realised)
	}
	if u.allow(f, 400) {
		t.Errorf("allow accepted a pre-read with 12 kB lost of an 8 kB allowance")
	}
	u.endEpoch(400, map[string]bool{})
	if u.scale != 0.5 {
		t.Errorf("scale after a wasteful epoch = %v, want 0.5", u.scale)
	}
	if u.totUnopened != 12 || u.totWasted != 12000 {
		t.Errorf("totals: unopened %d wasted %d, want 12 and 12000", u.totUnopened, u.totWasted)
	}
}

// readList reads files whole, in order, with workers goroutines (like a
// DataLoader).
func readList(t testing.TB, m *Manager, files []File, data map[string][]byte, workers int) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var bad atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(files) {
					return
				}
				f := files[i]
				r := m.Open(f)
				p := make([]byte, f.Size+100)
				n, err := r.ReadAt(context.Background(), p, 0)
				r.Close()
				if err != nil || !bytes.Equal(p[:n], data[f.Key]) {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if b := bad.Load(); b > 0 {
		t.Fatalf("%d bad reads", b)
	}
}

// waitPreReadIdle waits until m has no pre-reader running and no pre-read
// in flight (generous timeout: a state, not a time, is awaited).
func waitPreReadIdle(t testing.TB, m *Manager) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m.mu.Lock()
		running := 0
		for _, d := range m.dirs {
			if d.running {
				running++
			}
		}
		idle := running == 0 && m.epochInFlight == 0
		m.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pre-reading still running after 60 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestShardedRanksManager: Managers standing in for the mounts of 1, 2
// and 4 DistributedSampler ranks read four reshuffled epochs of one
// directory, none of which stays cached from one epoch to the next. From
// the second epoch on each rank fetches at most
// 1+WasteTarget times what it reads; a single node keeps pre-reading in
// full. With Sharded the cold epoch
// is within the target as well.
func TestShardedRanksManager(t *testing.T) {
	const n, size = 240, 8 << 10
	mem := objtest.NewMem()
	files, data := epochDir(t, mem, "train/c/", n, size)
	for _, tc := range []struct {
		ranks   int
		sharded bool
	}{{1, false}, {2, false}, {4, false}, {2, true}} {
		t.Run(fmt.Sprintf("%d ranks sharded=%v", tc.ranks, tc.sharded), func(t *testing.T) {
			g := newCountGetter(mem, time.Millisecond)
			m := newTestManager(t, Options{Getter: g, MaxMemory: 64 * mib, Sharded: tc.sharded})
			m.NoteDir("train/c/", files)
			for e := 0; e < 4; e++ {
				var list []File
				for _, i := range shard(n, tc.ranks, 0, e, true) {
					list = append(list, files[i])
				}
				before := m.Stats()
				readList(t, m, list, data, 4)
				waitPreReadIdle(t, m)
				after := m.Stats()
				for _, f := range files {
					m.Invalidate(f.Key) // as if the dataset did not fit the cache
				}
				fetched, read := after.BytesFetched-before.BytesFetched, after.BytesRead-before.BytesRead
				ratio := float64(fetched) / float64(read)
				hits := after.EpochHitOpens - before.EpochHitOpens
				t.Logf("epoch %d: fetched/read %.3f, %d of %d opens pre-read", e, ratio, hits, len(list))
				if read != int64(len(list)*size) {
					t.Fatalf("epoch %d: read %d bytes, want %d", e, read, len(list)*size)
				}
				if (e > 0 || tc.sharded) && ratio > 1+WasteTarget {
					t.Errorf("epoch %d: fetched/read = %.3f, want <= %.2f", e, ratio, 1+WasteTarget)
				}
				if tc.ranks == 1 {
					// The next epoch's pre-reads start as this one ends
					// (and Invalidate drops them), so hits are only
					// meaningful in the first epoch; later the controller
					// must still expect the whole directory.
					m.mu.Lock()
					all := m.dirs["train/c/"].u.all()
					m.mu.Unlock()
					if !all || (e == 0 && hits < int64(len(list)/2)) {
						t.Errorf("single node, epoch %d: %d of %d opens pre-read, whole directory expected %v; want >= %d and true", e, hits, len(list), all, len(list)/2)
					}
				}
			}
			st := m.Stats()
			t.Logf("pre-read files opened %d, not opened %d (%d bytes)", st.EpochOpened, st.EpochUnopened, st.EpochWasted)
			if tc.ranks > 1 && !tc.sharded && st.EpochUnopened < int64(n/tc.ranks/2) {
				t.Errorf("EpochUnopened = %d, want the cold epoch's waste (>= %d files) counted", st.EpochUnopened, n/tc.ranks/2)
			}
		})
	}
}
