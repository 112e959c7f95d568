package zarrtest

import (
	"slices"
	"testing"
)

var messageTests = []struct {
	msg    string
	names  []string
	faults []string
}{
	{"pipeline: open /nope.zarr: not found: no such file or directory", []string{"/nope.zarr"}, nil},
	{"pipeline: open /nope.zarr: not found: zarr: /nope.zarr: not found: zarr: store root: stat /nope.zarr: no such file or directory",
		[]string{"/nope.zarr"}, []string{"names /nope.zarr more than once", `says "not found" twice`, `says "zarr" twice`, "has more than one package prefix"}},
	{"pipeline: read /d/x.zarr: storage error: /d/x.zarr/c/0/0: not a regular file", []string{"/d/x.zarr"}, []string{"names /d/x.zarr more than once"}},
	{"pipeline: read /d/x.zarr: storage error: c/0/0: not a regular file", []string{"/d/x.zarr", "c/0/0"}, nil},
	{"pipeline: read /d/x.zarr: storage error: c/0/0: not a regular file", []string{"/d/x.zarr", "c/1/0"}, []string{"does not name c/1/0"}},
	// A name inside a longer name is not the name.
	{"zarr: /d/x.zarr2: not found", []string{"/d/x.zarr"}, []string{"does not name /d/x.zarr"}},
	{"zarr: /e/d/x.zarr: not found", []string{"/d/x.zarr"}, []string{"does not name /d/x.zarr"}},
	{"zarr: a/c/0/0: offset 3: shard index: crc32c mismatch", []string{"a/c/0/0"}, nil},
}

func TestMessageFaults(t *testing.T) {
	for _, tt := range messageTests {
		if got := MessageFaults(tt.msg, tt.names...); !slices.Equal(got, tt.faults) {
			t.Errorf("MessageFaults(%q, %q) = %q; want %q", tt.msg, tt.names, got, tt.faults)
		}
	}
}
