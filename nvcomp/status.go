package nvcomp

import (
	"errors"
	"sort"
	"strconv"
)

// Status is nvCOMP's nvcompStatus_t: the return value of every nvCOMP call
// and the per-chunk result that batched decompression writes to device
// memory (one int32 per chunk). Zero is success.
//
// Status implements error so that a per-chunk status read back from the
// device can be returned or wrapped as is; a successful status is never
// returned as an error by this package.
type Status int32

// The nvcompStatus_t values of nvcomp/shared_types.h (5.x and 6.x; 4.x has
// the values up to StatusChunkSizeTooLarge, 3.x only 0, 10–14, 1000 and 10000).
const (
	StatusSuccess                       Status = 0
	StatusInvalidValue                  Status = 10
	StatusNotSupported                  Status = 11
	StatusCannotDecompress              Status = 12
	StatusBadChecksum                   Status = 13
	StatusCannotVerifyChecksums         Status = 14
	StatusOutputBufferTooSmall          Status = 15
	StatusWrongHeaderLength             Status = 16
	StatusAlignment                     Status = 17
	StatusChunkSizeTooLarge             Status = 18
	StatusCannotCompress                Status = 19
	StatusWrongInputLength              Status = 20
	StatusBatchSizeTooLarge             Status = 21
	StatusSubChunkCountTooLarge         Status = 22
	StatusSubChunkCountTooSmall         Status = 23
	StatusOutputBufferAlignmentTooSmall Status = 24
	StatusCUDAError                     Status = 1000
	StatusInternal                      Status = 10000
)

// statusNames is sorted by code so that statusInfo can binary-search it. The
// names are the C enumerators; the descriptions are this package's.
var statusNames = [...]struct {
	code Status
	name string
	desc string
}{
	{StatusSuccess, "nvcompSuccess", "success"},
	{StatusInvalidValue, "nvcompErrorInvalidValue", "invalid argument"},
	{StatusNotSupported, "nvcompErrorNotSupported", "not supported"},
	{StatusCannotDecompress, "nvcompErrorCannotDecompress", "cannot decompress: corrupt input or output buffer too small"},
	{StatusBadChecksum, "nvcompErrorBadChecksum", "checksum mismatch"},
	{StatusCannotVerifyChecksums, "nvcompErrorCannotVerifyChecksums", "cannot verify checksums"},
	{StatusOutputBufferTooSmall, "nvcompErrorOutputBufferTooSmall", "output buffer too small"},
	{StatusWrongHeaderLength, "nvcompErrorWrongHeaderLength", "wrong header length"},
	{StatusAlignment, "nvcompErrorAlignment", "buffer not aligned as required"},
	{StatusChunkSizeTooLarge, "nvcompErrorChunkSizeTooLarge", "chunk size too large"},
	{StatusCannotCompress, "nvcompErrorCannotCompress", "cannot compress"},
	{StatusWrongInputLength, "nvcompErrorWrongInputLength", "wrong input length"},
	{StatusBatchSizeTooLarge, "nvcompErrorBatchSizeTooLarge", "batch size too large"},
	{StatusSubChunkCountTooLarge, "nvcompErrorSubChunkCountTooLarge", "sub-chunk count too large"},
	{StatusSubChunkCountTooSmall, "nvcompErrorSubChunkCountTooSmall", "sub-chunk count too small"},
	{StatusOutputBufferAlignmentTooSmall, "nvcompErrorOutputBufferAlignmentTooSmall", "output buffer alignment too small for the data type"},
	{StatusCUDAError, "nvcompErrorCudaError", "CUDA error"},
	{StatusInternal, "nvcompErrorInternal", "internal error"},
}

func statusInfo(s Status) (name, desc string, ok bool) {
	i := sort.Search(len(statusNames), func(i int) bool { return statusNames[i].code >= s })
	if i < len(statusNames) && statusNames[i].code == s {
		return statusNames[i].name, statusNames[i].desc, true
	}
	return "", "", false
}

// String returns the C name of the status, such as "nvcompErrorCannotDecompress",
// or "nvcompStatus(N)" for a code that no header defines.
func (s Status) String() string {
	if name, _, ok := statusInfo(s); ok {
		return name
	}
	return "nvcompStatus(" + strconv.Itoa(int(s)) + ")"
}

// Error returns the status name and a short description.
func (s Status) Error() string {
	if name, desc, ok := statusInfo(s); ok {
		return "nvcomp: " + name + " (" + desc + ")"
	}
	return "nvcomp: " + s.String()
}

// Error is a failed nvCOMP call: the C function that failed and the status
// it returned. It unwraps to the Status.
type Error struct {
	Op   string // the C function, e.g. "nvcompBatchedZstdDecompressAsync"
	Code Status
}

func (e *Error) Error() string {
	name, desc, ok := statusInfo(e.Code)
	if !ok {
		return "nvcomp: " + e.Op + ": " + e.Code.String()
	}
	return "nvcomp: " + e.Op + ": " + name + " (" + desc + ")"
}

// Unwrap returns the status code.
func (e *Error) Unwrap() error { return e.Code }

// Sentinel errors. Load's errors wrap them, so callers can decide to decode
// on the CPU with errors.Is.
var (
	// ErrNotFound means that no usable nvCOMP library was found.
	ErrNotFound = errors.New("nvcomp: library not found")
	// ErrUnsupportedVersion means that a library was found whose major
	// version this package has no ABI binding for.
	ErrUnsupportedVersion = errors.New("nvcomp: unsupported library version")
)

// check turns a call's status into nil or an *Error naming the call.
func check(op string, s Status) error {
	if s == StatusSuccess {
		return nil
	}
	return &Error{Op: op, Code: s}
}
