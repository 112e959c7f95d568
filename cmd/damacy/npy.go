package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/damacy-go/damacy/zarr"
)

// npyDescr is the NumPy dtype string of a zarr data type stored
// little-endian.
func npyDescr(dt zarr.DataType) (string, error) {
	switch dt {
	case zarr.Bool:
		return "|b1", nil
	case zarr.Int8:
		return "|i1", nil
	case zarr.Uint8:
		return "|u1", nil
	case zarr.Int16:
		return "<i2", nil
	case zarr.Uint16:
		return "<u2", nil
	case zarr.Int32:
		return "<i4", nil
	case zarr.Uint32:
		return "<u4", nil
	case zarr.Int64:
		return "<i8", nil
	case zarr.Uint64:
		return "<u8", nil
	case zarr.Float16:
		return "<f2", nil
	case zarr.Float32:
		return "<f4", nil
	case zarr.Float64:
		return "<f8", nil
	}
	return "", fmt.Errorf("no NumPy dtype for %v", dt)
}

// writeNPY writes data, C order, as a NumPy .npy file (format 1.0) of the
// given dtype string and shape.
func writeNPY(w io.Writer, descr string, shape []int64, data []byte) error {
	dims := make([]string, len(shape))
	for i, n := range shape {
		dims[i] = fmt.Sprint(n)
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, tuple)
	// The magic (6), version (2) and header length (2) plus the header and
	// its closing newline are padded with spaces to a multiple of 64.
	total := 10 + len(header) + 1
	header += strings.Repeat(" ", (64-total%64)%64) + "\n"
	if len(header) > 0xffff {
		return fmt.Errorf("npy header of %d bytes is too long for format 1.0", len(header))
	}
	var pre [10]byte
	copy(pre[:], "\x93NUMPY\x01\x00")
	binary.LittleEndian.PutUint16(pre[8:], uint16(len(header)))
	if _, err := w.Write(pre[:]); err != nil {
		return err
	}
	if _, err := io.WriteString(w, header); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// writeNPYFile writes a .npy file at path; a failed write leaves no file.
func writeNPYFile(path, descr string, shape []int64, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = writeNPY(bw, descr, shape, data)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}
