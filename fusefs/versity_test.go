package fusefs

import (
	"bytes"
	"crypto/sha256"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/os2g/os2g/objclient/objtest"
)

// The write side against a real S3 server (versitygw): multipart upload,
// special characters, rename by server-side copy, mkdir markers, rm -r.
func TestVersityWriteSide(t *testing.T) {
	requireFUSE(t)
	st := objtest.StartVersity(t)
	seed(t, st, obj{key: "sp/a b.txt", data: []byte("A_B")}, obj{key: "sp/a+b.txt", data: []byte("APB")})
	mnt := testMount(t, st, Options{PartSize: 5 << 20})

	wantNames(t, join(mnt, "sp"), "a b.txt", "a+b.txt")
	if b := readFile(t, join(mnt, "sp/a+b.txt")); string(b) != "APB" {
		t.Errorf("a+b.txt = %q", b)
	}
	writeFile(t, join(mnt, "sp/new 50%+x.bin"), []byte("hi\n"))
	if b, ok := storeData(t, st, "sp/new 50%+x.bin"); !ok || string(b) != "hi\n" {
		t.Errorf("sp/new 50%%+x.bin = %q, %v", b, ok)
	}

	// Multipart: 12 MiB in 5 MiB parts.
	data := make([]byte, 12<<20)
	for i := range data {
		data[i] = byte(i*131 + i>>9)
	}
	if err := os.Mkdir(join(mnt, "ckpt"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(join(mnt, "ckpt/m.bin"))
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := f.Write(data[off : off+1<<20]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	info, err := st.Stat(t.Context(), "ckpt/m.bin")
	if err != nil || info.Size != int64(len(data)) || !strings.HasSuffix(info.ETag, `-3"`) {
		t.Errorf("ckpt/m.bin: %+v, %v; want %d bytes, ETag ending -3", info, err, len(data))
	}
	if s := lstat(t, join(mnt, "ckpt/m.bin")); s.Size != int64(len(data)) {
		t.Errorf("stat after close: %d", s.Size)
	}

	// Rename (copy + delete) with special characters.
	if err := os.Mkdir(join(mnt, "ckpt/run[1]"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(join(mnt, "ckpt/m.bin"), join(mnt, "ckpt/run[1]/final model.bin")); err != nil {
		t.Fatalf("rename: %v", err)
	}
	if got := readFile(t, join(mnt, "ckpt/run[1]/final model.bin")); sha256.Sum256(got) != sha256.Sum256(data) {
		t.Errorf("renamed file differs")
	}
	_, err = os.Lstat(join(mnt, "ckpt/m.bin"))
	wantErrno(t, "stat old name", err, syscall.ENOENT)
	if _, ok := storeData(t, st, "ckpt/m.bin"); ok {
		t.Errorf("source key still present after rename")
	}

	// Overwrite, then rm -r.
	writeFile(t, join(mnt, "ckpt/run[1]/final model.bin"), []byte("v2"))
	if b := readFile(t, join(mnt, "ckpt/run[1]/final model.bin")); !bytes.Equal(b, []byte("v2")) {
		t.Errorf("after overwrite: %q", b)
	}
	wantErrno(t, "rmdir non-empty", syscall.Rmdir(join(mnt, "ckpt")), syscall.ENOTEMPTY)
	if err := os.RemoveAll(join(mnt, "ckpt")); err != nil {
		t.Fatalf("rm -r ckpt: %v", err)
	}
	_, err = os.Lstat(join(mnt, "ckpt"))
	wantErrno(t, "stat ckpt after rm -r", err, syscall.ENOENT)
	if _, ok := storeData(t, st, "ckpt/"); ok {
		t.Errorf("marker ckpt/ left behind")
	}
}
