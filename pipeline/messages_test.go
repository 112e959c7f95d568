package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
	"github.com/damacy-go/damacy/zarr/zarrtest"
)

// messageCase is one way for a call to fail: what it does to a fresh store
// (a 32x32 uint16 array of 8x8 zstd chunks in 16x16 shards, at path), the
// call, and what its error must be.
type messageCase struct {
	name  string
	setup func(t *testing.T, path string) (uri string) // damages the store; the URI the error is about ("" for none)
	cfg   func(*Config)                                // changes the pipeline's Config, if not nil
	call  func(t *testing.T, p *Pipeline, uri string) error
	kind  error
	names []string // store keys the message must name once, besides the URI
	want  string   // the whole message, with URI standing for the URI; "" to check only the rules
}

// popOne pushes one 8x8 sample of uri at (y, x), flushes and pops.
func popOne(y, x int64) func(t *testing.T, p *Pipeline, uri string) error {
	return func(t *testing.T, p *Pipeline, uri string) error {
		if err := p.Push(Sample{URI: uri, Box: []Range{{Start: y, Stop: y + 8}, {Start: x, Stop: x + 8}}}); err != nil {
			return err
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		b, err := p.Pop(context.Background())
		if err == nil {
			b.Release()
		}
		return err
	}
}

// rewrite replaces the file key of the store at path with what edit makes
// of its bytes.
func rewrite(t *testing.T, path, key string, edit func([]byte) []byte) {
	t.Helper()
	name := filepath.Join(path, filepath.FromSlash(key))
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, edit(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func intact(t *testing.T, path string) string { return path }

var messageCases = []messageCase{
	{
		name:  "missing store",
		setup: func(t *testing.T, path string) string { return path + ".nope" },
		call: func(t *testing.T, p *Pipeline, uri string) error {
			return p.Check(Sample{URI: uri, Box: []Range{{Start: 0, Stop: 8}, {Start: 0, Stop: 8}}})
		},
		kind: ErrNotFound,
		want: "pipeline: open URI: not found: no such file or directory",
	},
	{
		name:  "missing store at pop",
		setup: func(t *testing.T, path string) string { return path + ".nope" },
		call:  popOne(0, 0),
		kind:  ErrNotFound,
		want:  "pipeline: open (sample 1: URI[0:8,0:8]): not found: no such file or directory",
	},
	{
		name: "no zarr node",
		setup: func(t *testing.T, path string) string {
			empty := filepath.Join(filepath.Dir(path), "empty")
			if err := os.Mkdir(empty, 0o755); err != nil {
				t.Fatal(err)
			}
			return empty
		},
		call: func(t *testing.T, p *Pipeline, uri string) error {
			return p.Check(Sample{URI: uri, Box: []Range{{Start: 0, Stop: 8}, {Start: 0, Stop: 8}}})
		},
		kind: ErrNotFound,
		want: "pipeline: open URI: not found: no zarr.json, .zarray or .zgroup",
	},
	{
		name: "malformed metadata",
		setup: func(t *testing.T, path string) string {
			rewrite(t, path, "zarr.json", func(b []byte) []byte { return b[:len(b)/2] })
			return path
		},
		call: func(t *testing.T, p *Pipeline, uri string) error {
			return p.Check(Sample{URI: uri, Box: []Range{{Start: 0, Stop: 8}, {Start: 0, Stop: 8}}})
		},
		kind:  ErrInvalid,
		names: []string{"zarr.json"},
	},
	{
		name:  "level of an array",
		setup: intact,
		call: func(t *testing.T, p *Pipeline, uri string) error {
			return p.Check(Sample{URI: uri, Box: []Range{{Start: 0, Stop: 8}, {Start: 0, Stop: 8}}, Level: 1})
		},
		kind: ErrInvalid,
	},
	{
		name:  "element type too wide",
		setup: intact,
		cfg:   func(c *Config) { c.MaxBytesPerElement = 1 },
		call: func(t *testing.T, p *Pipeline, uri string) error {
			return p.Check(Sample{URI: uri, Box: []Range{{Start: 0, Stop: 8}, {Start: 0, Stop: 8}}})
		},
		kind: ErrDtype,
		want: "pipeline: open URI: unsupported data type: uint16 elements are 2 bytes, above Config.MaxBytesPerElement = 1",
	},
	{
		name:  "box rank not the array's",
		setup: intact,
		call: func(t *testing.T, p *Pipeline, uri string) error {
			return p.Check(Sample{URI: uri, Box: []Range{{Start: 0, Stop: 1}, {Start: 0, Stop: 8}, {Start: 0, Stop: 8}}})
		},
		kind: ErrRank,
		want: "pipeline: check: rank mismatch: sample URI[0:1,0:8,0:8]: box rank 3, array rank 2",
	},
	{
		name:  "box rank not the pipeline's",
		setup: intact,
		call: func(t *testing.T, p *Pipeline, uri string) error {
			return p.Push(Sample{URI: uri, Box: []Range{{Start: 0, Stop: 8}}})
		},
		kind: ErrRank,
	},
	{
		name:  "box of the wrong extent",
		setup: intact,
		call: func(t *testing.T, p *Pipeline, uri string) error {
			return p.Push(Sample{URI: uri, Box: []Range{{Start: 0, Stop: 8}, {Start: 0, Stop: 4}}})
		},
		kind: ErrInvalid,
		want: "pipeline: push: invalid argument: sample URI[0:8,0:4]: axis 1 extent 4, want 8",
	},
	{
		name: "truncated shard",
		setup: func(t *testing.T, path string) string {
			rewrite(t, path, "c/0/1", func(b []byte) []byte { return b[:len(b)/2] })
			return path
		},
		call:  popOne(0, 16),
		kind:  ErrDecode,
		names: []string{"c/0/1"},
	},
	{
		name: "bad shard index checksum",
		setup: func(t *testing.T, path string) string {
			rewrite(t, path, "c/1/1", func(b []byte) []byte { b[len(b)-10] ^= 1; return b })
			return path
		},
		call:  popOne(16, 16),
		kind:  ErrDecode,
		names: []string{"c/1/1"},
	},
	{
		name: "corrupt zstd frame",
		setup: func(t *testing.T, path string) string {
			// The shard's first chunk comes first; its zstd magic number
			// is broken.
			rewrite(t, path, "c/1/1", func(b []byte) []byte { b[0] ^= 0x5a; return b })
			return path
		},
		call:  popOne(16, 16),
		kind:  ErrDecode,
		names: []string{"c/1/1"},
	},
	{
		name: "unreadable shard",
		setup: func(t *testing.T, path string) string {
			// A directory where a shard file should be (a permission
			// change would not stop root).
			shard := filepath.Join(path, "c", "0", "0")
			if err := os.Remove(shard); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(shard, 0o755); err != nil {
				t.Fatal(err)
			}
			return path
		},
		call:  popOne(0, 0),
		kind:  ErrStorage,
		names: []string{"c/0/0"},
	},
	{
		name:  "cancelled pop",
		setup: intact,
		call: func(t *testing.T, p *Pipeline, uri string) error {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := p.Pop(ctx)
			return err
		},
		kind: ErrCanceled,
		want: "pipeline: pop: canceled: context canceled",
	},
	{
		name:  "pop after close",
		setup: intact,
		call: func(t *testing.T, p *Pipeline, uri string) error {
			p.Close()
			_, err := p.Pop(context.Background())
			return err
		},
		kind: ErrShutdown,
		want: "pipeline: pop: pipeline shut down",
	},
	{
		name:  "pop during close",
		setup: intact,
		call: func(t *testing.T, p *Pipeline, uri string) error {
			errc := make(chan error, 1)
			go func() {
				_, err := p.Pop(context.Background()) // nothing pushed: blocks
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond)
			p.Close()
			select {
			case err := <-errc:
				return err
			case <-time.After(30 * time.Second):
				t.Fatal("Pop still blocked 30 s after Close")
				return nil
			}
		},
		kind: ErrShutdown,
	},
	{
		name:  "push after close",
		setup: intact,
		call: func(t *testing.T, p *Pipeline, uri string) error {
			p.Close()
			return p.Push(Sample{URI: uri, Box: []Range{{Start: 0, Stop: 8}, {Start: 0, Stop: 8}}})
		},
		kind: ErrShutdown,
		want: "pipeline: push: pipeline shut down",
	},
}

// TestErrorMessages checks the message of each error a caller can meet
// against the rules of errors.go: the URI once, each of the store keys
// named once, no segment twice ("not found: ...: not found"), no other
// package's prefix, and for some the whole message.
func TestErrorMessages(t *testing.T) {
	cfg := Config{BatchSize: 1, SampleShape: []int{8, 8}, Device: "cpu", HostBufferBytes: 1 << 20, DeviceBufferBytes: 1 << 20, MaxChunkBytes: 64 << 10}
	spec := writer.Spec{Shape: []int64{32, 32}, ChunkShape: []int64{8, 8}, ShardShape: []int64{16, 16},
		DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd}}
	for _, tc := range messageCases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeCase(t, t.TempDir(), storeCase{name: "z.zarr", spec: spec}, 1)
			uri := tc.setup(t, path)
			c := cfg
			if tc.cfg != nil {
				tc.cfg(&c)
			}
			p := newChecked(t, c)
			err := tc.call(t, p, uri)
			checkError(t, tc.name, err, tc.kind)
			if err == nil {
				return
			}
			t.Log(err)
			var e *Error
			if errors.As(err, &e) && e.URI != "" && e.URI != uri {
				t.Errorf("%s: URI %q, want %q", tc.name, e.URI, uri)
			}
			if tc.want != "" {
				if want := strings.ReplaceAll(tc.want, "URI", uri); err.Error() != want {
					t.Errorf("%s:\n got %q\nwant %q", tc.name, err, want)
				}
			}
			names := tc.names
			if e != nil && e.URI != "" {
				names = append(names, e.URI)
			}
			zarrtest.CheckMessage(t, tc.name, err, names...)
		})
	}
}
