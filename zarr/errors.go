package zarr

import (
	"errors"
	"fmt"
)

// Sentinel errors. Test for them with errors.Is. Their texts carry no
// package prefix because they only ever reach callers inside an error that
// has one (a *FormatError, a *MetadataError or a wrapped "zarr: ..." error).
var (
	// ErrNotFound means that no array or group metadata exists at a path.
	// Missing chunks and shards are not errors: they read as the fill value.
	ErrNotFound = errors.New("not found")

	// ErrFormat means malformed input: metadata that breaks the zarr or
	// OME-NGFF specification, or stored bytes (a shard index, a chunk) that
	// cannot be what the metadata says they are.
	ErrFormat = errors.New("malformed")

	// ErrUnsupported means well-formed input that uses a feature this package
	// does not implement: a codec, data type, filter or extension it does not
	// know. The error names the feature.
	ErrUnsupported = errors.New("unsupported")

	// ErrChecksum means a stored checksum (crc32c, a zstd content checksum,
	// a gzip or zlib trailer) does not match the data.
	ErrChecksum = errors.New("checksum mismatch")

	// ErrCorrupt means a chunk's stored bytes failed to decode, or decoded to
	// a size other than the one the metadata implies.
	ErrCorrupt = errors.New("corrupt chunk")

	// ErrTooLarge means a chunk, shard index or stored object is larger than
	// the configured maximum (DecoderOptions.MaxChunkBytes and friends).
	ErrTooLarge = errors.New("exceeds size limit")

	// ErrInvalidKey means a store key is not a clean relative slash-separated
	// path: empty, absolute, with empty, "." or ".." segments, backslashes or
	// NUL bytes, or one that would resolve outside the store's root.
	ErrInvalidKey = errors.New("invalid key")
)

// FormatError reports stored bytes that do not match what the metadata
// describes: a truncated shard, an index entry past the end of its object,
// a bad checksum, a chunk that fails to decode or decodes to the wrong size.
//
// errors.Is(err, ErrFormat) holds for every FormatError; Err carries the
// specific reason, which wraps ErrChecksum, ErrCorrupt or ErrTooLarge where
// one of those applies.
type FormatError struct {
	Key    string // store key of the object at fault
	Offset int64  // byte offset within the object where the bad data starts; -1 if not applicable
	Err    error  // the reason
}

func (e *FormatError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("zarr: %s: %v", e.Key, e.Err)
	}
	return fmt.Sprintf("zarr: %s: offset %d: %v", e.Key, e.Offset, e.Err)
}

// Unwrap returns the reason.
func (e *FormatError) Unwrap() error { return e.Err }

// Is reports whether target is ErrFormat: every FormatError is one.
func (e *FormatError) Is(target error) bool { return target == ErrFormat }

// MetadataError reports a metadata document (zarr.json, .zarray, .zattrs)
// that cannot be used: malformed JSON, a missing or invalid field (Err wraps
// ErrFormat) or a feature this package does not implement (Err wraps
// ErrUnsupported).
type MetadataError struct {
	Key   string // store key of the document; empty when validating a value not read from a store
	Field string // JSON path of the field at fault (e.g. "codecs[1].configuration.endian"); empty for the whole document
	Err   error  // the reason
}

func (e *MetadataError) Error() string {
	key := e.Key
	if key == "" {
		key = "metadata"
	}
	if e.Field == "" {
		return fmt.Sprintf("zarr: %s: %v", key, e.Err)
	}
	return fmt.Sprintf("zarr: %s: %s: %v", key, e.Field, e.Err)
}

// Unwrap returns the reason.
func (e *MetadataError) Unwrap() error { return e.Err }

// malformed returns a reason wrapping ErrFormat.
func malformed(format string, args ...any) error {
	return &reason{kind: ErrFormat, msg: fmt.Sprintf(format, args...)}
}

// unsupported returns a reason wrapping ErrUnsupported.
func unsupported(format string, args ...any) error {
	return &reason{kind: ErrUnsupported, msg: "unsupported " + fmt.Sprintf(format, args...)}
}

// corrupt returns a reason wrapping ErrCorrupt; cause, if not nil, is
// wrapped too (a decompressor's own error).
func corrupt(cause error, format string, args ...any) error {
	return &reason{kind: ErrCorrupt, msg: fmt.Sprintf(format, args...), cause: cause}
}

// reason is the Err of a FormatError or MetadataError: a message that
// matches one sentinel (kind) and optionally wraps an underlying cause.
type reason struct {
	kind  error
	msg   string
	cause error
}

func (r *reason) Error() string {
	if r.msg == "" && r.cause != nil {
		return r.cause.Error()
	}
	if r.cause != nil {
		return r.msg + ": " + r.cause.Error()
	}
	return r.msg
}

func (r *reason) Is(target error) bool { return target == r.kind }

func (r *reason) Unwrap() error { return r.cause }

// metaErr builds a MetadataError for field of the document key.
func metaErr(key, field string, err error) *MetadataError {
	return &MetadataError{Key: key, Field: field, Err: err}
}

// withKey returns err with its Key set to key when err is a *MetadataError
// or *FormatError without one; other errors come back unchanged.
func withKey(err error, key string) error {
	switch e := err.(type) {
	case *MetadataError:
		if e.Key == "" {
			c := *e
			c.Key = key
			return &c
		}
	case *FormatError:
		if e.Key == "" {
			c := *e
			c.Key = key
			return &c
		}
	}
	return err
}
