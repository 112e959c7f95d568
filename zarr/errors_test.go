package zarr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// corruptCase builds a store holding one array named "a" whose data is
// damaged in one way, and says what reading it must report.
type corruptCase struct {
	name   string
	build  func(t *testing.T, fsys fstest.MapFS)
	open   error  // error from opening; nil if it opens
	read   error  // error from reading the whole array
	key    string // the key the error must name
	detail string // a word the message must contain
}

// writeSharded writes a 2-D uint16 array with one shard of 2x2 inner chunks
// (raw bytes, index at the end with crc32c) and returns the shard key.
func writeSharded(t *testing.T, fsys fstest.MapFS, inner *tchain) string {
	a := tarray{shape: []int64{8, 8}, chunk: []int64{8, 8}, dt: Uint16,
		chain: &tchain{shard: &tshard{chunk: []int64{4, 4}, inner: inner}}}
	a.write(t, fsys, "a", randArray(rand.New(rand.NewPCG(7, 7)), Uint16, 64))
	return "a/c/0/0"
}

// setEntry rewrites entry i of the shard index at the end of key and fixes
// the index checksum.
func setEntry(fsys fstest.MapFS, key string, i int, off, n uint64) {
	b := fsys[key].Data
	idx := b[len(b)-4*16-4 : len(b)-4]
	binary.LittleEndian.PutUint64(idx[16*i:], off)
	binary.LittleEndian.PutUint64(idx[16*i+8:], n)
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(idx, castagnoli))
}

var corruptCases = []corruptCase{
	{
		name: "unknown codec",
		build: func(t *testing.T, fsys fstest.MapFS) {
			fsys["a/zarr.json"] = &fstest.MapFile{Data: v3Doc(t, map[string]string{"codecs": `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"lzma"}]`})}
		},
		open: ErrUnsupported, key: "a/zarr.json", detail: `"lzma"`,
	},
	{
		name: "unknown dtype",
		build: func(t *testing.T, fsys fstest.MapFS) {
			fsys["a/zarr.json"] = &fstest.MapFile{Data: v3Doc(t, map[string]string{"data_type": `"complex128"`})}
		},
		open: ErrUnsupported, key: "a/zarr.json", detail: "complex128",
	},
	{
		name: "unknown v2 filter",
		build: func(t *testing.T, fsys fstest.MapFS) {
			fsys["a/.zarray"] = &fstest.MapFile{Data: v2Doc(t, map[string]string{"filters": `[{"id":"quantize","digits":3}]`})}
		},
		open: ErrUnsupported, key: "a/.zarray", detail: "quantize",
	},
	{
		name: "malformed JSON",
		build: func(t *testing.T, fsys fstest.MapFS) {
			fsys["a/zarr.json"] = &fstest.MapFile{Data: []byte(`{"zarr_format":3,"node_type":"array",`)}
		},
		open: ErrFormat, key: "a/zarr.json", detail: "JSON",
	},
	{
		name: "malformed v2 JSON",
		build: func(t *testing.T, fsys fstest.MapFS) {
			fsys["a/.zarray"] = &fstest.MapFile{Data: []byte(`{"zarr_format":2,"shape":[1,}`)}
		},
		open: ErrFormat, key: "a/.zarray", detail: "JSON",
	},
	{
		name:  "no array",
		build: func(t *testing.T, fsys fstest.MapFS) { fsys["b/zarr.json"] = &fstest.MapFile{Data: []byte(`{}`)} },
		open:  ErrNotFound, key: "a", detail: "zarr.json",
	},
	{
		name: "group",
		build: func(t *testing.T, fsys fstest.MapFS) {
			fsys["a/zarr.json"] = &fstest.MapFile{Data: []byte(`{"zarr_format":3,"node_type":"group"}`)}
		},
		open: ErrNotFound, key: "a/zarr.json", detail: "group",
	},
	{
		name: "shard shorter than its index",
		build: func(t *testing.T, fsys fstest.MapFS) {
			k := writeSharded(t, fsys, &tchain{})
			fsys[k].Data = fsys[k].Data[:40]
		},
		read: ErrFormat, key: "a/c/0/0", detail: "shorter than its index",
	},
	{
		name: "truncated shard",
		build: func(t *testing.T, fsys fstest.MapFS) {
			k := writeSharded(t, fsys, &tchain{})
			b := fsys[k].Data
			fsys[k].Data = append(b[:10:10], b[len(b)-68:]...) // chunks cut, index kept
		},
		read: ErrFormat, key: "a/c/0/0", detail: "past the end",
	},
	{
		name: "index entry past the end",
		build: func(t *testing.T, fsys fstest.MapFS) {
			k := writeSharded(t, fsys, &tchain{})
			setEntry(fsys, k, 3, 100, 1<<40)
		},
		read: ErrFormat, key: "a/c/0/0", detail: "entry 3",
	},
	{
		name: "index offset overflow",
		build: func(t *testing.T, fsys fstest.MapFS) {
			k := writeSharded(t, fsys, &tchain{})
			setEntry(fsys, k, 1, 1<<63, 1<<63)
		},
		read: ErrFormat, key: "a/c/0/0", detail: "entry 1",
	},
	{
		name: "half-empty index entry",
		build: func(t *testing.T, fsys fstest.MapFS) {
			k := writeSharded(t, fsys, &tchain{})
			setEntry(fsys, k, 2, sentinel, 32)
		},
		read: ErrFormat, key: "a/c/0/0", detail: "half empty",
	},
	{
		name: "bad index crc32c",
		build: func(t *testing.T, fsys fstest.MapFS) {
			k := writeSharded(t, fsys, &tchain{})
			fsys[k].Data[len(fsys[k].Data)-10] ^= 1
		},
		read: ErrChecksum, key: "a/c/0/0", detail: "crc32c",
	},
	{
		name: "bad chunk crc32c",
		build: func(t *testing.T, fsys fstest.MapFS) {
			k := writeSharded(t, fsys, &tchain{bb: []tcodec{crc32cT}})
			fsys[k].Data[5] ^= 0x40
		},
		read: ErrChecksum, key: "a/c/0/0", detail: "crc32c",
	},
	{
		name: "bad zstd checksum",
		build: func(t *testing.T, fsys fstest.MapFS) {
			k := writeSharded(t, fsys, &tchain{bb: []tcodec{zstdCodecT(true, false, false)}})
			b := fsys[k].Data
			e := binary.LittleEndian.Uint64(b[len(b)-68:]) // entry 0
			n := binary.LittleEndian.Uint64(b[len(b)-60:])
			b[e+n-1] ^= 0xff // the last byte of chunk 0's content checksum
		},
		read: ErrChecksum, key: "a/c/0/0", detail: "zstd",
	},
	{
		name: "corrupt zstd",
		build: func(t *testing.T, fsys fstest.MapFS) {
			a := tarray{shape: []int64{8, 8}, chunk: []int64{8, 8}, dt: Uint16, chain: &tchain{bb: []tcodec{zstdCodecT(false, false, false)}}}
			a.write(t, fsys, "a", randArray(rand.New(rand.NewPCG(8, 8)), Uint16, 64))
			fsys["a/c/0/0"].Data = fsys["a/c/0/0"].Data[:len(fsys["a/c/0/0"].Data)/2]
		},
		read: ErrCorrupt, key: "a/c/0/0", detail: "zstd",
	},
	{
		name: "chunk decodes short",
		build: func(t *testing.T, fsys fstest.MapFS) {
			a := tarray{shape: []int64{8, 8}, chunk: []int64{8, 8}, dt: Uint16, chain: &tchain{bb: []tcodec{zstdCodecT(false, false, false)}}}
			a.write(t, fsys, "a", make([]byte, 128))
			fsys["a/c/0/0"].Data = zstdCodecT(false, false, false).enc(t, make([]byte, 100))
		},
		read: ErrCorrupt, key: "a/c/0/0", detail: "100 bytes",
	},
	{
		name: "chunk decodes long",
		build: func(t *testing.T, fsys fstest.MapFS) {
			a := tarray{shape: []int64{8, 8}, chunk: []int64{8, 8}, dt: Uint16, chain: &tchain{bb: []tcodec{gzipT}}}
			a.write(t, fsys, "a", make([]byte, 128))
			fsys["a/c/0/0"].Data = gzipT.enc(t, make([]byte, 129))
		},
		read: ErrCorrupt, key: "a/c/0/0", detail: "more than",
	},
	{
		name: "raw chunk of the wrong size",
		build: func(t *testing.T, fsys fstest.MapFS) {
			a := tarray{shape: []int64{8, 8}, chunk: []int64{8, 8}, dt: Uint16, chain: &tchain{}}
			a.write(t, fsys, "a", make([]byte, 128))
			fsys["a/c/0/0"].Data = make([]byte, 127)
		},
		read: ErrCorrupt, key: "a/c/0/0", detail: "127",
	},
	{
		name: "lz4 prefix lies",
		build: func(t *testing.T, fsys fstest.MapFS) {
			a := tarray{shape: []int64{8, 8}, chunk: []int64{8, 8}, dt: Uint16, chain: &tchain{bb: []tcodec{lz4T}}}
			a.write(t, fsys, "a", make([]byte, 128))
			binary.LittleEndian.PutUint32(fsys["a/c/0/0"].Data, 1<<30)
		},
		read: ErrCorrupt, key: "a/c/0/0", detail: "lz4",
	},
	{
		name: "corrupt blosc",
		build: func(t *testing.T, fsys fstest.MapFS) {
			a := tarray{shape: []int64{64, 64}, chunk: []int64{64, 64}, dt: Uint16, chain: &tchain{bb: []tcodec{bloscT("lz4", 1, 2)}}}
			a.write(t, fsys, "a", randArray(rand.New(rand.NewPCG(9, 9)), Uint16, 64*64))
			binary.LittleEndian.PutUint32(fsys["a/c/0/0"].Data[4:], 1000) // nbytes
		},
		read: ErrCorrupt, key: "a/c/0/0", detail: "blosc",
	},
	{
		name: "corrupt inner shard of a wrapped shard",
		build: func(t *testing.T, fsys fstest.MapFS) {
			a := tarray{shape: []int64{8, 8}, chunk: []int64{8, 8}, dt: Uint16,
				chain: &tchain{shard: &tshard{chunk: []int64{4, 4}, inner: &tchain{}}, bb: []tcodec{crc32cT}}}
			a.write(t, fsys, "a", make([]byte, 128))
			b := fsys["a/c/0/0"].Data
			b[len(b)-12] ^= 1 // inside the index's crc32c, before the outer crc32c
			binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], castagnoli))
		},
		read: ErrChecksum, key: "a/c/0/0", detail: "inner shard",
	},
}

func TestCorruptData(t *testing.T) {
	for _, tc := range corruptCases {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			tc.build(t, fsys)
			a, err := OpenStore(NewFSStore(fsys), "a")
			if tc.open != nil {
				checkErr(t, "OpenStore", err, tc.open, tc.key, tc.detail)
				if a != nil {
					t.Error("OpenStore returned an array with its error")
				}
				return
			}
			if err != nil {
				t.Fatalf("OpenStore: %v", err)
			}
			r, err := a.ReadRegion(boxOf(a.Shape(), 0, 0))
			checkErr(t, "ReadRegion", err, tc.read, tc.key, tc.detail)
			if r != nil {
				t.Error("ReadRegion returned a region with its error")
			}
		})
	}
}

func checkErr(t *testing.T, op string, err, want error, key, detail string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want an error wrapping %v", op, err, want)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "zarr: ") || !strings.Contains(msg, key) || !strings.Contains(msg, detail) {
		t.Errorf("%s: message %q should start with \"zarr: \" and name %q and %q", op, msg, key, detail)
	}
	zarrtest.CheckMessage(t, op, err, key)
	// Stored data at fault is a *FormatError; metadata a *MetadataError.
	var fe *FormatError
	var me *MetadataError
	switch {
	case op == "ReadRegion" && (!errors.As(err, &fe) || fe.Key != key):
		t.Errorf("%s: got %T %v, want a *FormatError for %q", op, err, err, key)
	case op == "OpenStore" && want != ErrNotFound && (!errors.As(err, &me) || me.Key != key):
		t.Errorf("%s: got %T %v, want a *MetadataError for %q", op, err, err, key)
	}
}

func TestPathErrors(t *testing.T) {
	s := NewFSStore(fstest.MapFS{})
	for _, p := range []string{"../x", "a/../../b", `a\b`, "a//b"} {
		if _, err := OpenStore(s, p); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("OpenStore(%q) = %v; want ErrInvalidKey", p, err)
		}
		if _, err := OpenNGFFStore(s, p); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("OpenNGFFStore(%q) = %v; want ErrInvalidKey", p, err)
		}
	}
	if _, err := Open(t.TempDir() + "/missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open(missing directory) = %v; want ErrNotFound", err)
	}
	if _, err := Open(t.TempDir()); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open(empty directory) = %v; want ErrNotFound", err)
	}
}

// TestOpenMessages checks the errors of opening a local path that holds
// no zarr node: the kind, the *fs.PathError beneath, and a message that
// names the path once and says each thing once.
func TestOpenMessages(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path     string
		notFound bool // errors.Is ErrNotFound
		notExist bool // errors.Is fs.ErrNotExist, with an *fs.PathError beneath
		want     string
	}{
		{filepath.Join(dir, "missing"), true, true, filepath.Join(dir, "missing") + ": not found: no such file or directory"},
		{dir, true, false, dir + ": not found: no zarr.json, .zarray or .zgroup"},
		{file, false, false, file + ": not a directory"},
	}
	opens := []struct {
		name string
		open func(string) error
	}{
		{"Open", func(p string) error { _, err := Open(p); return err }},
		{"OpenNGFF", func(p string) error { _, err := OpenNGFF(p); return err }},
		{"Inspect", func(p string) error { _, err := Inspect(p); return err }},
	}
	for _, tt := range tests {
		for _, o := range opens {
			err := o.open(tt.path)
			what := fmt.Sprintf("%s(%q)", o.name, tt.path)
			var pe *fs.PathError
			switch {
			case err == nil:
				t.Errorf("%s succeeded", what)
				continue
			case errors.Is(err, ErrNotFound) != tt.notFound:
				t.Errorf("%s = %v; errors.Is(err, ErrNotFound) = %v, want %v", what, err, !tt.notFound, tt.notFound)
			case tt.notExist && (!errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe)):
				t.Errorf("%s = %v; want fs.ErrNotExist from an *fs.PathError", what, err)
			case err.Error() != "zarr: "+tt.want:
				t.Errorf("%s = %q; want %q", what, err, "zarr: "+tt.want)
			}
			zarrtest.CheckMessage(t, what, err, tt.path)
		}
	}
}

// TestChunkLimit checks that a chunk larger than MaxChunkBytes is refused
// before anything is allocated for it.
func TestChunkLimit(t *testing.T) {
	fsys := fstest.MapFS{}
	a := tarray{shape: []int64{64, 64}, chunk: []int64{64, 64}, dt: Uint32, chain: &tchain{bb: []tcodec{zstdCodecT(false, false, false)}}}
	a.write(t, fsys, "a", randArray(rand.New(rand.NewPCG(10, 10)), Uint32, 64*64))
	arr := openMap(t, fsys, "a")
	p, err := arr.Plan(boxOf(arr.Shape(), 0, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(DecoderOptions{MaxChunkBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	stored, _ := ReadAll(arr.Store(), p.Chunks[0].Key)
	err = d.Decode(make([]byte, 64*64*4), &p.Chunks[0], stored)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "a/c/0/0") {
		t.Errorf("Decode of a 16 KiB chunk with a 1000-byte limit = %v; want ErrTooLarge naming the key", err)
	}
	if _, err := NewDecoder(DecoderOptions{MaxChunkBytes: -1}); err == nil {
		t.Error("NewDecoder accepted a negative limit")
	}
	d.Close()
	if err := d.Decode(make([]byte, 64*64*4), &p.Chunks[0], stored); err == nil {
		t.Error("Decode after Close succeeded")
	}
}
