package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"image"
	"image/png"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// fashionDir holds Debian's dataset-fashion-mnist idx files.
const fashionDir = "/usr/share/datasets/fashion-mnist"

// fashionClasses are Fashion-MNIST's label names, used as class directories.
var fashionClasses = []string{"T-shirt_top", "Trouser", "Pullover", "Dress", "Coat",
	"Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot"}

// readIDX reads a gzip-compressed idx file (magic 0x0000080N: unsigned
// bytes, N dimensions) and returns its dimensions and payload.
func readIDX(path string) ([]int, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, nil, err
	}
	return parseIDX(b)
}

// parseIDX parses an uncompressed idx blob of unsigned bytes.
func parseIDX(b []byte) ([]int, []byte, error) {
	if len(b) < 4 || b[0] != 0 || b[1] != 0 || b[2] != 0x08 {
		return nil, nil, fmt.Errorf("idx: bad magic")
	}
	nd := int(b[3])
	if len(b) < 4+4*nd {
		return nil, nil, fmt.Errorf("idx: short header")
	}
	dims := make([]int, nd)
	total := 1
	for i := range nd {
		dims[i] = int(binary.BigEndian.Uint32(b[4+4*i:]))
		total *= dims[i]
	}
	data := b[4+4*nd:]
	if len(data) != total {
		return nil, nil, fmt.Errorf("idx: %d payload bytes, dims %v want %d", len(data), dims, total)
	}
	return dims, data, nil
}

// genLoader writes count 28x28 grayscale PNGs into an ImageFolder tree
// (one directory per class) under root: Fashion-MNIST images when Debian's
// data set is installed, else deterministic noise. It records the pixel sum
// the loader must see (each gray value counts three times, since
// torchvision's default loader converts to RGB).
func genLoader(root string, count int, m *manifest, log *slog.Logger) error {
	var imgs, labels []byte
	dims, data, err := readIDX(filepath.Join(fashionDir, "train-images-idx3-ubyte.gz"))
	if err == nil && len(dims) == 3 && dims[1] == 28 && dims[2] == 28 {
		var ld []int
		ld, labels, err = readIDX(filepath.Join(fashionDir, "train-labels-idx1-ubyte.gz"))
		if err == nil && len(ld) == 1 && ld[0] == dims[0] {
			imgs = data
		}
	}
	n := len(labels)
	if imgs == nil {
		log.Warn("Fashion-MNIST not readable; generating noise images", "dir", fashionDir, "err", err)
		n = 0
	}
	for _, c := range fashionClasses {
		if err := os.MkdirAll(filepath.Join(root, c), 0o755); err != nil {
			return err
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	var sum int64
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.DefaultCompression}
	for i := range count {
		g := image.NewGray(image.Rect(0, 0, 28, 28))
		label := i % len(fashionClasses)
		if n > 0 {
			j := i % n
			copy(g.Pix, imgs[j*784:(j+1)*784])
			label = int(labels[j]) % len(fashionClasses)
		} else {
			for k := range g.Pix {
				g.Pix[k] = byte(rng.IntN(256))
			}
		}
		for _, p := range g.Pix {
			sum += 3 * int64(p)
		}
		buf.Reset()
		if err := enc.Encode(&buf, g); err != nil {
			return err
		}
		p := filepath.Join(root, fashionClasses[label], fmt.Sprintf("img%06d.png", i))
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	m.LoaderPixelSum = sum
	return nil
}
