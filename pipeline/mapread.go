package pipeline

import (
	"time"

	"github.com/damacy-go/damacy/zarr"
)

// rawCodec reports whether chunks of codec c are stored as their bytes,
// uncompressed: a shard's when its inner chunks are (a shard that only
// holds chunks and their index).
func rawCodec(c *zarr.ChunkCodec) bool {
	for !c.Leaf() {
		c = c.Sharding().Inner()
	}
	rt := c.Route()
	return rt.Simple && rt.Compression == zarr.CompressionNone
}

// mapReads takes the wave's reads of mapped files out of what the IO
// workers pread: w.mapped[i] holds the mapping read i is read from (until
// releaseMaps). A read of firstSight bytes or more maps its file first
// (fileMaps.add decides; with firstSightRaw, only an uncompressed
// array's). It returns the reads left to pread.
func (s *stages) mapReads(w *wave) ([]readOp, error) {
	w.mapped = make([]*fileMap, len(w.reads))
	var rest []readOp
	var n int64
	for i := range w.reads {
		r := &w.reads[i]
		if r.src.dir != nil {
			if path, err := r.src.dir.Path(r.key); err == nil {
				f := s.maps.acquire(path)
				if f == nil && s.maps.firstSight > 0 && r.length >= s.maps.firstSight && (!s.maps.firstSightRaw || rawCodec(r.src.arr.Codec())) {
					f = s.mapNow(path, r.length)
				}
				if f != nil {
					w.mapped[i] = f
					if err := checkMapped(f, r); err != nil {
						return nil, err
					}
					n += r.length
					continue
				}
			}
		}
		rest = append(rest, *r)
	}
	if n > 0 {
		s.stats.update(func(st *Stats) {
			st.BytesRead += n
			st.BytesMapped += n
		})
	} else {
		w.mapped = nil
	}
	return rest, nil
}

// heatUp counts the preads of local files and maps the files that have
// now been read as many bytes as they hold.
func (s *stages) heatUp(reads []readOp) {
	var hot []string
	for i := range reads {
		r := &reads[i]
		if r.src.dir == nil {
			continue
		}
		path, err := r.src.dir.Path(r.key)
		if err != nil {
			continue
		}
		size, ok := s.fds.files.Size(path)
		if ok && s.maps.note(path, r.length, size) {
			hot = append(hot, path)
		}
	}
	for _, path := range hot {
		s.mapFile(path, 0)
	}
	s.stats.update(func(st *Stats) { st.MappedFileBytes = s.maps.mapped() })
}

// mapNow maps path for a read of n bytes seen for the first time, if
// fileMaps.add takes it, and returns the mapping acquired, or nil.
func (s *stages) mapNow(path string, n int64) *fileMap {
	if !s.mapFile(path, n) {
		return nil
	}
	s.stats.update(func(st *Stats) { st.MappedFileBytes = s.maps.mapped() })
	return s.maps.acquire(path)
}

// mapFile asks fileMaps.add to map path (covered as add takes it),
// tracing the mapping; a file that cannot be mapped is logged and read
// into staging. It reports whether the file was mapped.
func (s *stages) mapFile(path string, covered int64) bool {
	t := time.Now()
	mapped, err := s.maps.add(path, covered)
	if err != nil {
		s.cfg.Logger.Debug("damacy: file not mapped; it is read into staging", "path", path, "reason", err)
		return false
	}
	if mapped {
		s.trace.span(Span{Stage: "map", Lane: "io stage", Batch: -1, Wave: -1, Start: t, End: time.Now()})
	}
	return mapped
}

// releaseMaps gives back the mappings a wave's reads held.
func (s *stages) releaseMaps(w *wave) {
	for _, f := range w.mapped {
		if f != nil {
			s.maps.release(f)
		}
	}
	w.mapped = nil
}

// stored returns how to find a job's stored bytes on the host: in the
// slab, or in the mapping of its file.
func (w *wave) stored(slab []byte) func(*job) []byte {
	if w.mapped == nil {
		return func(j *job) []byte { return j.inSlab(slab) }
	}
	return func(j *job) []byte {
		if f := w.mapped[j.readOp]; f != nil {
			return f.data[j.chunk.Offset : j.chunk.Offset+j.chunk.Length]
		}
		return j.inSlab(slab)
	}
}

// guard runs f, which reads the wave's stored bytes, through readMapped
// when some of them are mapped.
func (w *wave) guard(f func() error) error {
	if w.mapped == nil {
		return f()
	}
	return readMapped(f)
}
