package remote

import (
	"io"
	"strconv"
	"strings"
	"sync"
)

// contentRange is a parsed Content-Range: bytes first-last/total (total
// -1 for "*"), or bytes */total for a 416 (first and last -1).
type contentRange struct{ first, last, total int64 }

func parseContentRange(h string) (contentRange, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(h), "bytes ")
	if !ok {
		return contentRange{}, false
	}
	span, total, ok := strings.Cut(strings.TrimSpace(rest), "/")
	if !ok {
		return contentRange{}, false
	}
	cr := contentRange{first: -1, last: -1, total: -1}
	if total != "*" {
		n, err := strconv.ParseInt(total, 10, 64)
		if err != nil || n < 0 {
			return contentRange{}, false
		}
		cr.total = n
	}
	if span == "*" || cr.total == 0 {
		// An empty object has no byte to name (Go's file server writes
		// "bytes 0--1/0" for it).
		return cr, cr.total >= 0
	}
	a, b, ok := strings.Cut(span, "-")
	if !ok {
		return contentRange{}, false
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || first < 0 || last < first || (cr.total >= 0 && last >= cr.total) {
		return contentRange{}, false
	}
	cr.first, cr.last = first, last
	return cr, true
}

// sink is where a GET's bytes go: the ranges of one ReadRanges, filled in
// order as the body streams, the bytes between them discarded. pos is the
// next byte of the object expected, so a retry asks for [pos, end).
type sink struct {
	ranges []Range
	i      int   // the first range not yet complete
	pos    int64 // next object byte to receive
	end    int64 // one past the last byte wanted
	// scratch holds buffers of scratchSize (*[]byte) that the bytes
	// between ranges are read into and dropped (the Opener's; Store.get
	// sets it).
	scratch *sync.Pool
}

// scratchSize is the size of the buffers that the bytes between ranges
// are read into: large reads, few system calls.
const scratchSize = 64 << 10

func newSink(ranges []Range) *sink {
	k := &sink{ranges: ranges, pos: ranges[0].Off}
	last := ranges[len(ranges)-1]
	k.end = last.Off + int64(len(last.Buf))
	k.skipEmpty()
	return k
}

func (k *sink) skipEmpty() {
	for k.i < len(k.ranges) && len(k.ranges[k.i].Buf) == 0 {
		k.i++
	}
}

func (k *sink) rangeHeader() string {
	var buf [48]byte
	b := append(buf[:0], "bytes="...)
	b = strconv.AppendInt(b, k.pos, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, k.end-1, 10)
	return string(b)
}

// consume reads r, which yields the object's bytes from k.pos on, until
// k.pos reaches limit (at most k.end) or r fails; a body that ends early
// is io.ErrUnexpectedEOF.
func (k *sink) consume(r io.Reader, limit int64) error {
	for k.pos < limit {
		rg := &k.ranges[k.i]
		if k.pos < rg.Off {
			n, err := k.skip(r, min(rg.Off, limit)-k.pos)
			k.pos += n
			if err != nil {
				return unexpected(err)
			}
			continue
		}
		stop := min(rg.Off+int64(len(rg.Buf)), limit)
		n, err := io.ReadFull(r, rg.Buf[k.pos-rg.Off:stop-rg.Off])
		k.pos += int64(n)
		if k.pos == rg.Off+int64(len(rg.Buf)) {
			k.i++
			k.skipEmpty()
		}
		if err != nil {
			return unexpected(err)
		}
	}
	return nil
}

// skip reads n bytes of r and drops them, as io.CopyN to io.Discard does.
func (k *sink) skip(r io.Reader, n int64) (int64, error) {
	bp := k.scratch.Get().(*[]byte)
	defer k.scratch.Put(bp)
	var done int64
	for done < n {
		m, err := r.Read((*bp)[:min(n-done, int64(len(*bp)))])
		done += int64(m)
		if err != nil {
			if err == io.EOF && done == n {
				break
			}
			return done, err
		}
	}
	return done, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
