package safetensors

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// file builds a file of the JSON header js and data bytes of zeros.
func file(js string, data int) []byte {
	b := make([]byte, 8+len(js)+data)
	binary.LittleEndian.PutUint64(b, uint64(len(js)))
	copy(b[8:], js)
	return b
}

func parseFile(b []byte) (*Header, error) {
	n, err := HeaderLen(b, int64(len(b)))
	if err != nil {
		return nil, err
	}
	return Parse(b[8:8+n], int64(len(b)))
}

func TestParseValid(t *testing.T) {
	js := `{"b":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]},"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},` +
		`"z":{"dtype":"I64","shape":[],"data_offsets":[32,40]},"e":{"dtype":"U8","shape":[0],"data_offsets":[40,40]},` +
		`"__metadata__":{"format":"pt","crc32c:a":"0000abcd"}}   `
	h, err := parseFile(file(js, 40))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range h.Tensors {
		names = append(names, x.Name)
	}
	if got := strings.Join(names, ","); got != "a,b,z,e" {
		t.Errorf("order %s, want a,b,z,e (by offset)", got)
	}
	if h.DataStart != int64(8+len(js)) || h.DataSize != 40 {
		t.Errorf("DataStart %d DataSize %d", h.DataStart, h.DataSize)
	}
	if b := h.Tensors[1]; b.DType != "F32" || len(b.Shape) != 2 || b.Shape[1] != 3 || b.Size() != 24 {
		t.Errorf("tensor b = %+v", b)
	}
	if c, ok, err := h.CRC("a"); c != 0xabcd || !ok || err != nil {
		t.Errorf("CRC(a) = %x %v %v", c, ok, err)
	}
	if _, ok, _ := h.CRC("b"); ok {
		t.Error("CRC(b) found")
	}
	if h.Metadata["format"] != "pt" {
		t.Errorf("metadata %v", h.Metadata)
	}
}

func TestParseMalformed(t *testing.T) {
	ok := `"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"short", []byte{1, 2, 3}, "shorter than the 8-byte"},
		{"huge length", func() []byte { b := file("{}", 0); binary.LittleEndian.PutUint64(b, MaxHeader+1); return b }(), "cap"},
		{"length past EOF", func() []byte { b := file("{}", 0); binary.LittleEndian.PutUint64(b, 100); return b }(), "past the end"},
		{"not JSON", file("[1,2]", 0), "not a JSON object"},
		{"bad JSON", file(`{"a":`, 0), "header JSON"},
		{"trailing bytes", file(`{}{}`, 0), "after the header"},
		{"unknown dtype", file(`{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}`, 16), "unknown dtype"},
		{"missing field", file(`{"a":{"dtype":"F32","shape":[1]}}`, 4), "lacks"},
		{"offsets past data", file(`{`+ok+`}`, 4), "outside"},
		{"reversed offsets", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, 4), "outside"},
		{"shape mismatch", file(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8), "span"},
		{"negative dim", file(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, 8), "negative"},
		{"overflow", file(`{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, 8), "overflows"},
		{"three offsets", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, 2), "2"},
		{"overlap", file(`{`+ok+`,"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}`, 8), "overlap"},
		{"metadata not strings", file(`{"__metadata__":{"x":1}}`, 0), "__metadata__"},
		{"bad crc", file(`{`+ok+`,"__metadata__":{"crc32c:a":"xyz"}}`, 8), "hex"},
	}
	for _, c := range cases {
		_, err := parseFile(c.file)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v; want ErrMalformed mentioning %q", c.name, err, c.want)
		}
	}
}

func TestLayoutEncodeRoundTrip(t *testing.T) {
	specs := []Spec{{"w.bias", "F16", []int64{3}}, {"w", "F32", []int64{2, 2}}, {"step", "I64", nil}, {"mask", "BOOL", []int64{5}}}
	ts, size, err := Layout(specs)
	if err != nil {
		t.Fatal(err)
	}
	if size != 6+16+8+5 {
		t.Errorf("size %d", size)
	}
	for _, x := range ts {
		es, _ := DTypeSize(x.DType)
		if x.Begin%es != 0 {
			t.Errorf("%s at %d not aligned to %d", x.Name, x.Begin, es)
		}
	}
	prefix, err := Encode(ts, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	if len(prefix)%8 != 0 {
		t.Errorf("data starts at %d, not a multiple of 8", len(prefix))
	}
	f := append(prefix, make([]byte, size)...)
	h, err := parseFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Tensors) != 4 || h.DataStart != int64(len(prefix)) || h.DataSize != size || h.Metadata["k"] != "v" {
		t.Fatalf("parsed %+v", h)
	}
	for i, x := range h.Tensors {
		if x.Name != ts[i].Name || x.Begin != ts[i].Begin || x.End != ts[i].End {
			t.Errorf("tensor %d: %+v, wrote %+v", i, x, ts[i])
		}
	}
	for _, bad := range [][]Spec{{{"", "F32", nil}}, {{"a", "F32", nil}, {"a", "U8", nil}}, {{"a", "Q4", nil}}, {{MetadataKey, "U8", nil}}, {{"a", "U8", []int64{-1}}}} {
		if _, _, err := Layout(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("Layout(%v) = %v; want ErrMalformed", bad, err)
		}
	}
}

// FuzzParse: Parse never panics, and whatever it accepts lies inside the
// file without overlaps.
func FuzzParse(f *testing.F) {
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 8))
	f.Add(file(`{"__metadata__":{"a":"b"}}`, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseFile(b)
		if err != nil {
			return
		}
		var end int64
		for _, x := range h.Tensors {
			if x.Begin < end || x.End < x.Begin || h.DataStart+x.End > int64(len(b)) {
				t.Fatalf("accepted bad tensor %+v", x)
			}
			end = x.End
		}
	})
}
