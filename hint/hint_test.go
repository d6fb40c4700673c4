package hint

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/os2g/os2g/prefetch"
)

func TestKeys(t *testing.T) {
	tests := []struct {
		name, mp, prefix string
		paths            []string
		want             []string
		err              error
	}{
		{"relative", "/mnt/data", "train/", []string{"cls_a/1.png", "cls_b/2.png"}, []string{"train/cls_a/1.png", "train/cls_b/2.png"}, nil},
		{"absolute", "/mnt/data", "", []string{"/mnt/data/cls_a/1.png", "/mnt/data//x/./y.png"}, []string{"cls_a/1.png", "x/y.png"}, nil},
		{"mounted at root", "/", "p/", []string{"/a/b"}, []string{"p/a/b"}, nil},
		{"dot dot inside", "/mnt/data", "", []string{"a/../b.png"}, []string{"b.png"}, nil},
		{"special names", "/mnt/data", "", []string{"a b/c+d%e.png"}, []string{"a b/c+d%e.png"}, nil},
		{"absolute outside", "/mnt/data", "", []string{"/mnt/data/ok", "/etc/passwd"}, nil, ErrOutside},
		{"sibling prefix outside", "/mnt/data", "", []string{"/mnt/data2/x"}, nil, ErrOutside},
		{"relative escapes", "/mnt/data", "", []string{"../x"}, nil, ErrOutside},
		{"relative escapes deeper", "/mnt/data", "", []string{"a/../../x"}, nil, ErrOutside},
		{"mount point itself", "/mnt/data", "", []string{"/mnt/data/"}, nil, ErrBadPath},
		{"dot", "/mnt/data", "", []string{"."}, nil, ErrBadPath},
		{"empty", "/mnt/data", "", []string{""}, nil, ErrBadPath},
		{"nul", "/mnt/data", "", []string{"a\x00b"}, nil, ErrBadPath},
		{"relative mount point", "mnt", "", []string{"a"}, nil, ErrBadPath},
		{"none", "/mnt/data", "", []string{}, []string{}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Keys(tc.paths, tc.mp, tc.prefix)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Keys(%q) err = %v, want %v", tc.paths, err, tc.err)
			}
			if err == nil && !slices.Equal(got, tc.want) {
				t.Errorf("Keys(%q) = %q, want %q", tc.paths, got, tc.want)
			}
		})
	}
	_, err := Keys([]string{"a", "/etc/passwd"}, "/mnt/data", "")
	if err == nil || !strings.Contains(err.Error(), `files[1] "/etc/passwd"`) {
		t.Errorf("error %v does not name the offending path and its position", err)
	}
}

func TestDecode(t *testing.T) {
	req, err := Decode(strings.NewReader(`{"files": ["a", "b"], "epoch": 3}`), 1<<10)
	if err != nil || !slices.Equal(req.Files, []string{"a", "b"}) || req.Epoch == nil || *req.Epoch != 3 {
		t.Errorf("Decode = %+v, %v", req, err)
	}
	for _, bad := range []string{``, `{`, `[]`, `{"epoch": 1}`, `{"files": "a"}`, `{"files": [], "x": 1}`, `{"files": [], "stream": "` + strings.Repeat("s", 300) + `"}`, `{"files": ["` + strings.Repeat("a", 2000) + `"]}`} {
		if _, err := Decode(strings.NewReader(bad), 1<<10); !errors.Is(err, ErrBadRequest) {
			t.Errorf("Decode(%.40q) err = %v, want ErrBadRequest", bad, err)
		}
	}
}

// fakeHinter records hints and answers as told.
type fakeHinter struct {
	streams []string
	got     [][]string
	st      prefetch.HintStatus
	err     error
}

func (f *fakeHinter) Hint(stream string, keys []string) (prefetch.HintStatus, error) {
	f.streams = append(f.streams, stream)
	f.got = append(f.got, keys)
	return f.st, f.err
}

func TestHandler(t *testing.T) {
	f := &fakeHinter{st: prefetch.HintStatus{Files: 2, Unknown: 1}}
	var logged []string
	h := Handler(f, "/mnt/data", "train/", func(format string, a ...any) { logged = append(logged, format) })
	do := func(method, body string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, "/hint", strings.NewReader(body)))
		var m map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("reply %q is not JSON: %v", rec.Body.String(), err)
		}
		return rec.Code, m
	}
	code, m := do("POST", `{"files": ["a/1.png", "/mnt/data/b/2.png", "c/3.png"], "epoch": 1, "stream": "rank1"}`)
	if code != 200 || m["files"] != 2.0 || m["unknown"] != 1.0 {
		t.Errorf("reply %d %v, want 200 files 2 unknown 1", code, m)
	}
	if len(f.got) != 1 || !slices.Equal(f.got[0], []string{"train/a/1.png", "train/b/2.png", "train/c/3.png"}) || f.streams[0] != "rank1" {
		t.Errorf("hinted %q (streams %q)", f.got, f.streams)
	}
	if len(logged) != 1 {
		t.Errorf("%d log lines, want 1", len(logged))
	}
	code, m = do("POST", `{"files": ["a", "/etc/shadow"]}`)
	if code != 400 || !strings.Contains(m["error"].(string), "outside the mount") {
		t.Errorf("outside path: reply %d %v, want 400 naming the path outside", code, m)
	}
	if len(f.got) != 1 {
		t.Errorf("a hint with a path outside the mount reached the Manager")
	}
	if code, _ = do("GET", ``); code != 405 {
		t.Errorf("GET: %d, want 405", code)
	}
	if code, _ = do("POST", `nope`); code != 400 {
		t.Errorf("garbage: %d, want 400", code)
	}
	f.err = prefetch.ErrNoHint
	if code, m = do("POST", `{"files": ["zzz"]}`); code != 422 {
		t.Errorf("no known file: %d %v, want 422", code, m)
	}
}

// FuzzKeys: any path either fails with ErrOutside or ErrBadPath, or maps
// to prefix + a clean relative path that cannot climb out of the mount.
func FuzzKeys(f *testing.F) {
	for _, s := range []string{"a/b.png", "/mnt/data/x", "../x", "a/../../b", "/mnt/data/", ".", "", "a//b/./c", "/mnt/data2/x", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		keys, err := Keys([]string{p}, "/mnt/data", "pre/")
		if err != nil {
			if !errors.Is(err, ErrOutside) && !errors.Is(err, ErrBadPath) {
				t.Fatalf("Keys(%q): unexpected error %v", p, err)
			}
			return
		}
		rel, ok := strings.CutPrefix(keys[0], "pre/")
		if !ok || rel == "" || strings.HasPrefix(rel, "/") || rel == ".." || strings.HasPrefix(rel, "../") ||
			strings.Contains(rel, "/../") || strings.HasSuffix(rel, "/..") || strings.Contains(rel, "//") {
			t.Fatalf("Keys(%q) = %q: not a clean path under the mount", p, keys[0])
		}
	})
}
