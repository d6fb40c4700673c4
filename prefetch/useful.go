package prefetch

// The usefulness controller of epoch pre-reading (issue 15).
//
// A pre-read file that no handle opens in its epoch is waste: bytes fetched
// from the store and never read. On one node reading a whole directory
// every pre-read is used; on a rank of PyTorch's DistributedSampler, which
// reads a share p of each directory, pre-reading the whole directory
// fetches 1/p times what the node reads. The controller keeps the waste of
// each directory's pre-reading under WasteTarget of the bytes read, with
// one rule: each candidate file f gets an estimated probability u(f) of
// being opened this epoch, and it is pre-read only while
//
//	expected waste of the pre-reads outstanding + realised waste + (1-u(f))*size(f)
//	  <= WasteTarget * margin * bytes read this epoch
//
// (a pre-read file, once opened, turns its expected waste into none). u
// comes from what the directory's last finished epoch showed:
//
//   - No epoch finished yet and no --sharded: u = 1 for every file (a
//     single node reading everything, today's cold-epoch speed). In this
//     first, cold epoch a DistributedSampler rank cannot be told apart
//     from a single node: the reader's next open is a uniformly random
//     file of its share, so the chance that it finds a pre-read file is
//     (pre-read unopened files)/(unread files of the directory), the same
//     for every share. The share shows only when the epoch ends (a file is
//     read again): the rank's cold epoch fetches about 1/p times what it
//     reads, and the second epoch is where the controller acts.
//   - The last epoch read a share >= FullShare of the files (and no
//     --sharded): u = 1, as above.
//   - Otherwise the files read last epoch are the prediction (a stable
//     share: DistributedSampler(shuffle=False), a fixed shard): u(f in
//     prediction) is the fraction of this epoch's opens that the
//     prediction held, with Laplace's rule ((hits+1)/(opens+2)), so that a
//     stable share is pre-read fully after a few opens and a reshuffled
//     one (about p of the opens predicted) is held to the allowance. Files
//     outside the prediction get u = the chance that an unread file is
//     still to be read, max(0, p*F - opens)/(F - opens), from the last
//     share p of F files; 0 when the share is unknown (--sharded, cold).
//
// Realised waste also counts pre-reads dropped unread (evicted when the
// budget is tight). When an epoch ends with realised waste above
// WasteTarget of the bytes read, the allowance is halved for the next
// epoch (down to 1/16); an epoch within the target doubles it back (up to
// 1). A new epoch always re-estimates the share, so a node that returns to
// reading everything gets full pre-reading back after one epoch.

// Controller constants.
const (
	// WasteTarget is the wasted-bytes/read-bytes ratio pre-reading stays
	// under (issue 15: 10%).
	WasteTarget = 0.10
	// wasteMargin keeps the expectation below the target, so the realised
	// ratio's spread stays under it too.
	wasteMargin = 0.8
	// FullShare: a node that read at least this fraction of a directory's
	// files in an epoch reads the whole directory.
	FullShare = 0.9
	minScale  = 1.0 / 16
)

// Candidate classes: predicted (read last epoch) or not.
const (
	clsPredicted = iota
	clsOther
)

// preRead is one file the pre-reader fetched this epoch.
type preRead struct {
	size   int64
	cls    int
	opened bool
	lost   bool // dropped unread (waste realised)
}

// usefulness is a directory's pre-read controller. It is pure bookkeeping
// (no locks, no clock): dirState holds one, guarded by Manager.mu.
type usefulness struct {
	sharded bool // the user said this node reads a share (--sharded)

	// From the last finished epoch.
	finished int             // epochs finished
	share    float64         // files read / files listed (valid when finished > 0)
	prev     map[string]bool // files read (the prediction)
	scale    float64         // allowance multiplier in [minScale, 1]

	// This epoch.
	opens     int   // distinct files read
	predicted int   // of which in prev
	readBytes int64 // bytes of the files read
	issued    map[string]*preRead
	out       [2]int64 // bytes pre-read, not opened and not lost, by class
	realised  int64    // wasted bytes known already (dropped unread)

	// Totals over all epochs.
	totOpened, totUnopened, totWasted int64
}

func newUsefulness(sharded bool) usefulness {
	return usefulness{sharded: sharded, scale: 1, issued: map[string]*preRead{}}
}

// all says whether every file is expected to be read (u = 1).
func (u *usefulness) all() bool {
	if u.sharded {
		return false
	}
	return u.finished == 0 || u.share >= FullShare
}

// class is key's candidate class.
func (u *usefulness) class(key string) int {
	if u.prev[key] {
		return clsPredicted
	}
	return clsOther
}

// useProb is u for an unread file of class cls in a directory of nFiles
// files: the opens still expected this epoch (last share times nFiles,
// less the opens so far), split between the classes as this epoch's opens
// were (Laplace's rule), over the unread files of the class.
func (u *usefulness) useProb(cls, nFiles int) float64 {
	if u.all() {
		return 1
	}
	if u.finished == 0 {
		return 0 // --sharded, cold: the share is unknown
	}
	remaining := max(0, u.share*float64(nFiles)-float64(u.opens))
	a := float64(u.predicted+1) / float64(u.opens+2)
	if len(u.prev) == 0 {
		a = 0
	}
	var exp, unread float64
	if cls == clsPredicted {
		exp, unread = a*remaining, float64(len(u.prev)-u.predicted)
	} else {
		exp, unread = (1-a)*remaining, float64(nFiles-u.opens-(len(u.prev)-u.predicted))
	}
	if unread <= 0 {
		return 0
	}
	return min(1, exp/unread)
}

// expectedWaste is the waste known (realised) plus the expected waste of
// the pre-reads outstanding, in bytes.
func (u *usefulness) expectedWaste(nFiles int) float64 {
	w := float64(u.realised)
	for c, b := range u.out {
		if b > 0 {
			w += float64(b) * (1 - u.useProb(c, nFiles))
		}
	}
	return w
}

// allow says whether f may be pre-read now, in a directory of nFiles
// files.
func (u *usefulness) allow(f File, nFiles int) bool {
	if u.all() {
		return true
	}
	cost := (1 - u.useProb(u.class(f.Key), nFiles)) * float64(f.Size)
	return u.expectedWaste(nFiles)+cost <= WasteTarget*wasteMargin*u.scale*float64(u.readBytes)
}

// rank orders candidates: predicted files first (they are the likeliest
// used), so a refusal of the first candidate means none would fit.
func (u *usefulness) rank(key string) int { return u.class(key) }

// onIssue records that the pre-reader fetches f.
func (u *usefulness) onIssue(f File) {
	if _, ok := u.issued[f.Key]; ok {
		return
	}
	p := &preRead{size: f.Size, cls: u.class(f.Key)}
	u.issued[f.Key] = p
	u.out[p.cls] += p.size
}

// onRead records that key (size bytes) was read this epoch, once per file.
func (u *usefulness) onRead(key string, size int64) {
	u.opens++
	u.readBytes += size
	if u.prev[key] {
		u.predicted++
	}
	if p := u.issued[key]; p != nil && !p.opened && !p.lost {
		p.opened = true
		u.out[p.cls] -= p.size
		u.totOpened++
	}
}

// onLost records that the pre-read of key was dropped before anyone read
// it (evicted, or the pre-reader gave it up).
func (u *usefulness) onLost(key string) {
	if p := u.issued[key]; p != nil && !p.opened && !p.lost {
		p.lost = true
		u.out[p.cls] -= p.size
		u.realised += p.size
	}
}

// endEpoch closes the epoch of a directory of nFiles files and prepares
// the next one; read is the set of files read this epoch.
func (u *usefulness) endEpoch(nFiles int, read map[string]bool) {
	var wasted int64
	for _, p := range u.issued {
		if !p.opened {
			wasted += p.size
			u.totUnopened++
		}
	}
	u.totWasted += wasted
	if float64(wasted) > WasteTarget*float64(u.readBytes) && !u.all() {
		u.scale = max(minScale, u.scale/2)
	} else {
		u.scale = min(1, u.scale*2)
	}
	if nFiles > 0 {
		u.share = min(1, float64(u.opens)/float64(nFiles))
	}
	u.prev = make(map[string]bool, len(read))
	for k := range read {
		u.prev[k] = true
	}
	u.finished++
	u.opens, u.predicted, u.readBytes = 0, 0, 0
	u.issued = map[string]*preRead{}
	u.out = [2]int64{}
	u.realised = 0
}
