package nvcomp

import (
	"errors"
	"strings"
	"testing"

	"github.com/ebitengine/purego"
)

var statusTests = []struct {
	code Status
	name string
	err  string
}{
	{StatusSuccess, "nvcompSuccess", "nvcomp: nvcompSuccess (success)"},
	{StatusCannotDecompress, "nvcompErrorCannotDecompress", "nvcomp: nvcompErrorCannotDecompress (cannot decompress: corrupt input or output buffer too small)"},
	{StatusBadChecksum, "nvcompErrorBadChecksum", "nvcomp: nvcompErrorBadChecksum (checksum mismatch)"},
	{StatusOutputBufferAlignmentTooSmall, "nvcompErrorOutputBufferAlignmentTooSmall", "nvcomp: nvcompErrorOutputBufferAlignmentTooSmall (output buffer alignment too small for the data type)"},
	{StatusCUDAError, "nvcompErrorCudaError", "nvcomp: nvcompErrorCudaError (CUDA error)"},
	{StatusInternal, "nvcompErrorInternal", "nvcomp: nvcompErrorInternal (internal error)"},
	{5, "nvcompStatus(5)", "nvcomp: nvcompStatus(5)"},
	{-1, "nvcompStatus(-1)", "nvcomp: nvcompStatus(-1)"},
}

func TestStatusString(t *testing.T) {
	for _, tt := range statusTests {
		if got := tt.code.String(); got != tt.name {
			t.Errorf("Status(%d).String() = %q; want %q", int32(tt.code), got, tt.name)
		}
		if got := tt.code.Error(); got != tt.err {
			t.Errorf("Status(%d).Error() = %q; want %q", int32(tt.code), got, tt.err)
		}
	}
}

func TestStatusTableSorted(t *testing.T) {
	for i := 1; i < len(statusNames); i++ {
		if statusNames[i-1].code >= statusNames[i].code {
			t.Errorf("statusNames[%d] (%d) is not above statusNames[%d] (%d)", i, statusNames[i].code, i-1, statusNames[i-1].code)
		}
	}
	if got := len(statusNames); got != 18 {
		t.Errorf("len(statusNames) = %d; want the 18 values of the 6.0 header", got)
	}
}

func TestErrorWrapsStatus(t *testing.T) {
	var err error = &Error{Op: "nvcompBatchedZstdDecompressAsync", Code: StatusInvalidValue}
	if got, want := err.Error(), "nvcomp: nvcompBatchedZstdDecompressAsync: nvcompErrorInvalidValue (invalid argument)"; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	if !errors.Is(err, StatusInvalidValue) || errors.Is(err, StatusNotSupported) {
		t.Errorf("errors.Is(%v, StatusInvalidValue) is false, or it matches StatusNotSupported", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Op != "nvcompBatchedZstdDecompressAsync" {
		t.Errorf("errors.As(%v) = %v", err, e)
	}
	if got, want := (&Error{Op: "x", Code: 77}).Error(), "nvcomp: x: nvcompStatus(77)"; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	if check("x", StatusSuccess) != nil {
		t.Error(`check("x", StatusSuccess) != nil`)
	}
}

func TestChunkError(t *testing.T) {
	tests := []struct {
		status Status
		size   uint64
		want   int
		err    string
	}{
		{StatusSuccess, 100, 100, ""},
		{StatusSuccess, 60, 100, "nvcomp: chunk 3: decoded 60 bytes, want 100"},
		{StatusCannotDecompress, 0, 100, "nvcomp: chunk 3: nvcompErrorCannotDecompress"},
		{StatusCannotDecompress, 100, 100, "nvcomp: chunk 3: nvcompErrorCannotDecompress"},
	}
	for _, tt := range tests {
		err := CheckChunk(3, tt.status, tt.size, tt.want)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.err {
			t.Errorf("CheckChunk(3, %v, %d, %d) = %q; want %q", tt.status, tt.size, tt.want, got, tt.err)
		}
		if tt.status != StatusSuccess && !errors.Is(err, tt.status) {
			t.Errorf("CheckChunk(3, %v, ...) does not wrap the status", tt.status)
		}
	}
}

// TestStatusNamesMatchLibrary checks the status table against the loaded
// library's nvcompGetStatusString (5.2 and later): every code of the table
// is known to the library, and codes outside it are not.
func TestStatusNamesMatchLibrary(t *testing.T) {
	lib := mustLoad(t)
	h, err := purego.Dlopen(lib.Path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	defer purego.Dlclose(h)
	addr, err := purego.Dlsym(h, "nvcompGetStatusString")
	if err != nil {
		t.Skipf("nvCOMP %s has no nvcompGetStatusString (added in 5.2): %v", lib.Version, err)
	}
	var statusString func(Status) string
	purego.RegisterFunc(&statusString, addr)
	unknown := statusString(7)
	if !strings.Contains(strings.ToLower(unknown), "unrecognized") {
		t.Fatalf("nvcompGetStatusString(7) = %q; want an 'unrecognized' text", unknown)
	}
	for _, e := range statusNames {
		if s := statusString(e.code); s == unknown {
			t.Errorf("nvCOMP %s does not know %s (%d)", lib.Version, e.name, e.code)
		}
	}
	for c := Status(-3); c < 20000; c++ {
		if _, _, ok := statusInfo(c); !ok && statusString(c) != unknown {
			t.Errorf("nvCOMP %s knows code %d (%q), the table does not", lib.Version, c, statusString(c))
		}
	}
}
