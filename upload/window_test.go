package upload

import (
	"bytes"
	"errors"
	"testing"
)

// sink records what a Window pushes; failAt > 0 fails the push that
// would take the total past failAt bytes.
type sink struct {
	got    bytes.Buffer
	pushes int
	failAt int
}

var errSink = errors.New("sink failed")

func (s *sink) push(p []byte) error {
	if s.failAt > 0 && s.got.Len()+len(p) > s.failAt {
		return errSink
	}
	s.pushes++
	s.got.Write(p)
	return nil
}

// op is one call on a window: write data at off, truncate to size, or
// read n bytes at off.
type op struct {
	kind string // "write", "extend", "truncate", "read"
	off  int64
	data string
	n    int
}

func TestWindow(t *testing.T) {
	tests := []struct {
		name       string
		size       int64
		ops        []op
		wantErr    error  // of the last op
		wantRead   string // of the last op, when a read
		wantPushed string
		wantHeld   string
		wantBase   int64
	}{
		{name: "sequential within the window", size: 8,
			ops:      []op{{kind: "write", off: 0, data: "abc"}, {kind: "write", off: 3, data: "def"}},
			wantHeld: "abcdef"},
		{name: "past the window pushes all but the newer half", size: 8,
			ops:        []op{{kind: "write", off: 0, data: "abcdefgh"}, {kind: "write", off: 8, data: "i"}},
			wantPushed: "abcde", wantHeld: "fghi", wantBase: 5},
		{name: "seek back within the window patches", size: 8,
			ops:        []op{{kind: "write", off: 0, data: "abcdefghi"}, {kind: "write", off: 6, data: "XY"}},
			wantPushed: "abcde", wantHeld: "fXYi", wantBase: 5},
		{name: "seek back before the window fails", size: 8,
			ops:        []op{{kind: "write", off: 0, data: "abcdefghi"}, {kind: "write", off: 4, data: "X"}},
			wantErr:    ErrBeforeWindow,
			wantPushed: "abcde", wantHeld: "fghi", wantBase: 5},
		{name: "write past the end zero-fills", size: 8,
			ops:      []op{{kind: "write", off: 0, data: "ab"}, {kind: "write", off: 5, data: "c"}},
			wantHeld: "ab\x00\x00\x00c"},
		{name: "long gap zero-fills through several pushes", size: 4,
			ops:        []op{{kind: "write", off: 0, data: "a"}, {kind: "write", off: 10, data: "b"}},
			wantPushed: "a\x00\x00\x00\x00\x00\x00\x00\x00", wantHeld: "\x00b", wantBase: 9},
		{name: "extend zero-fills", size: 8,
			ops:      []op{{kind: "write", off: 0, data: "ab"}, {kind: "extend", off: 4}},
			wantHeld: "ab\x00\x00"},
		{name: "extend to before the end is a no-op", size: 8,
			ops:      []op{{kind: "write", off: 0, data: "abcd"}, {kind: "extend", off: 2}},
			wantHeld: "abcd"},
		{name: "truncate within the window cuts", size: 8,
			ops:      []op{{kind: "write", off: 0, data: "abcdef"}, {kind: "truncate", off: 2}},
			wantHeld: "ab"},
		{name: "truncate to the base empties the window", size: 8,
			ops:        []op{{kind: "write", off: 0, data: "abcdefghi"}, {kind: "truncate", off: 5}},
			wantPushed: "abcde", wantHeld: "", wantBase: 5},
		{name: "truncate before the window fails", size: 8,
			ops:        []op{{kind: "write", off: 0, data: "abcdefghi"}, {kind: "truncate", off: 4}},
			wantErr:    ErrNotHeld,
			wantPushed: "abcde", wantHeld: "fghi", wantBase: 5},
		{name: "truncate past the end zero-fills", size: 8,
			ops:      []op{{kind: "write", off: 0, data: "ab"}, {kind: "truncate", off: 3}},
			wantHeld: "ab\x00"},
		{name: "read back held bytes", size: 8,
			ops:      []op{{kind: "write", off: 0, data: "abcdef"}, {kind: "read", off: 2, n: 3}},
			wantRead: "cde", wantHeld: "abcdef"},
		{name: "read at the end is short", size: 8,
			ops:      []op{{kind: "write", off: 0, data: "abcdef"}, {kind: "read", off: 4, n: 5}},
			wantRead: "ef", wantHeld: "abcdef"},
		{name: "read after the end is empty", size: 8,
			ops:      []op{{kind: "write", off: 0, data: "ab"}, {kind: "read", off: 7, n: 5}},
			wantRead: "", wantHeld: "ab"},
		{name: "read of pushed bytes fails", size: 8,
			ops:        []op{{kind: "write", off: 0, data: "abcdefghi"}, {kind: "read", off: 3, n: 4}},
			wantErr:    ErrPushed,
			wantPushed: "abcde", wantHeld: "fghi", wantBase: 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s sink
			w, err := New(tc.size, s.push)
			if err != nil {
				t.Fatal(err)
			}
			var last error
			var read string
			for i, o := range tc.ops {
				switch o.kind {
				case "write":
					last = w.Write([]byte(o.data), o.off)
				case "extend":
					last = w.Extend(o.off)
				case "truncate":
					last = w.Truncate(o.off)
				case "read":
					buf := make([]byte, o.n)
					var k int
					k, last = w.ReadAt(buf, o.off)
					read = string(buf[:k])
				}
				if last != nil && i < len(tc.ops)-1 {
					t.Fatalf("op %d (%s): %v", i, o.kind, last)
				}
			}
			if !errors.Is(last, tc.wantErr) || (tc.wantErr == nil && last != nil) {
				t.Errorf("last op: err %v, want %v", last, tc.wantErr)
			}
			if read != tc.wantRead {
				t.Errorf("read %q, want %q", read, tc.wantRead)
			}
			if got := s.got.String(); got != tc.wantPushed {
				t.Errorf("pushed %q, want %q", got, tc.wantPushed)
			}
			if got := string(w.Held()); got != tc.wantHeld {
				t.Errorf("held %q, want %q", got, tc.wantHeld)
			}
			if w.Base() != tc.wantBase {
				t.Errorf("Base %d, want %d", w.Base(), tc.wantBase)
			}
			if want := tc.wantBase + int64(len(tc.wantHeld)); w.End() != want {
				t.Errorf("End %d, want %d", w.End(), want)
			}
		})
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	if _, err := New(1, func([]byte) error { return nil }); err == nil {
		t.Error("New(1, push): no error, want one (below MinSize)")
	}
	if _, err := New(8, nil); err == nil {
		t.Error("New(8, nil): no error, want one")
	}
}

// A push error is returned unchanged by the write or extend that caused
// it.
func TestWindowPushError(t *testing.T) {
	s := sink{failAt: 2}
	w, err := New(4, s.push)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write([]byte("abcde"), 0); !errors.Is(err, errSink) {
		t.Errorf("Write: %v, want %v", err, errSink)
	}
	s2 := sink{failAt: 2}
	w2, _ := New(4, s2.push)
	if err := w2.Extend(100); !errors.Is(err, errSink) {
		t.Errorf("Extend: %v, want %v", err, errSink)
	}
}

// Discard leaves End at Base: later reads there read nothing, reads
// before it still fail.
func TestWindowDiscard(t *testing.T) {
	var s sink
	w, _ := New(8, s.push)
	if err := w.Write([]byte("abcdefghi"), 0); err != nil {
		t.Fatal(err)
	}
	w.Discard()
	if w.End() != 5 || len(w.Held()) != 0 {
		t.Errorf("after Discard: End %d, %d held; want 5, 0", w.End(), len(w.Held()))
	}
	if k, err := w.ReadAt(make([]byte, 4), 6); k != 0 || err != nil {
		t.Errorf("ReadAt(6) = %d, %v; want 0, nil", k, err)
	}
	if _, err := w.ReadAt(make([]byte, 4), 2); !errors.Is(err, ErrPushed) {
		t.Errorf("ReadAt(2): %v, want %v", err, ErrPushed)
	}
}

// FuzzWindow checks a window against a plain byte slice: whatever
// sequence of writes and truncates it accepts, the pushed bytes followed
// by the held ones equal the model, at most size+1 bytes are ever held,
// and only calls before Base are refused.
func FuzzWindow(f *testing.F) {
	f.Add(uint8(8), []byte{0, 3, 5, 1, 2, 0, 12, 9})
	f.Add(uint8(2), []byte{0, 0, 1, 1, 30, 2, 0, 1})
	f.Fuzz(func(t *testing.T, size uint8, prog []byte) {
		if size < MinSize {
			size = MinSize
		}
		var s sink
		w, err := New(int64(size), s.push)
		if err != nil {
			t.Fatal(err)
		}
		var model []byte
		for i := 0; i+2 < len(prog); i += 3 {
			kind, off, n := prog[i]%2, int64(prog[i+1]), int(prog[i+2]%16)
			base := w.Base()
			switch kind {
			case 0: // write n bytes of value i at off
				p := bytes.Repeat([]byte{byte(i)}, n)
				err := w.Write(p, off)
				if off < base {
					if !errors.Is(err, ErrBeforeWindow) {
						t.Fatalf("Write before Base: %v", err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if end := int(off) + n; end > len(model) {
					model = append(model, make([]byte, end-len(model))...)
				}
				if int(off) > len(model) {
					model = append(model, make([]byte, int(off)-len(model))...)
				}
				copy(model[off:], p)
			case 1: // truncate to off
				err := w.Truncate(off)
				if off < base {
					if !errors.Is(err, ErrNotHeld) {
						t.Fatalf("Truncate before Base: %v", err)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if int(off) <= len(model) {
					model = model[:off]
				} else {
					model = append(model, make([]byte, int(off)-len(model))...)
				}
			}
			if len(w.Held()) > int(size)+1 {
				t.Fatalf("%d bytes held, window %d", len(w.Held()), size)
			}
		}
		got := append(s.got.Bytes(), w.Held()...)
		if !bytes.Equal(got, model) {
			t.Fatalf("pushed+held %v, model %v", got, model)
		}
	})
}
