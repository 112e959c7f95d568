package pipeline

import (
	"time"

	"github.com/damacy-go/damacy/cuda"
)

// mapReads takes the part's reads of mapped files out of what the IO
// workers pread: p.mapped[i] holds the mapping read i is copied from
// (until the wave retires). It returns the reads left to pread.
func (e *cudaEngine) mapReads(p *wavePart) ([]readOp, error) {
	p.mapped = make([]*fileMap, len(p.reads))
	var rest []readOp
	var n int64
	for i := range p.reads {
		r := &p.reads[i]
		if r.src.dir != nil {
			if path, err := r.src.dir.Path(r.key); err == nil {
				if f := e.maps.acquire(path); f != nil {
					p.mapped[i] = f
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
		e.stats.update(func(st *Stats) {
			st.BytesRead += n
			st.BytesMapped += n
		})
	} else {
		p.mapped = nil
	}
	return rest, nil
}

// heatUp counts the preads of local files and maps the files that have
// now been read as many bytes as they hold.
func (e *cudaEngine) heatUp(reads []readOp) {
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
		size, ok := e.fds.files.Size(path)
		if ok && e.maps.note(path, r.length, size) {
			hot = append(hot, path)
		}
	}
	for _, path := range hot {
		t := time.Now()
		if err := e.maps.add(path); err != nil {
			e.cfg.Logger.Debug("damacy: file not mapped; it is read into staging", "path", path, "reason", err)
			continue
		}
		e.trace.span(Span{Stage: "map", Lane: "io stage", Batch: -1, Wave: -1, Start: t, End: time.Now()})
	}
	e.stats.update(func(st *Stats) { st.MappedFileBytes = e.maps.mapped() })
}

// releaseMaps gives back the mappings a wave's reads held.
func (e *cudaEngine) releaseMaps(cw *cudaWave) {
	for _, p := range cw.parts {
		for _, f := range p.mapped {
			if f != nil {
				e.maps.release(f)
			}
		}
		p.mapped = nil
	}
}

// stored returns how to find a job's stored bytes on the host: in the
// slab, or in the mapping of its file.
func (p *wavePart) stored(slab []byte) func(*job) []byte {
	if p.mapped == nil {
		return func(j *job) []byte { return j.inSlab(slab) }
	}
	return func(j *job) []byte {
		if f := p.mapped[j.readOp]; f != nil {
			return f.data[j.chunk.Offset : j.chunk.Offset+j.chunk.Length]
		}
		return j.inSlab(slab)
	}
}

// guard runs f, which reads the part's stored bytes, through readMapped
// when some of them are mapped.
func (p *wavePart) guard(f func() error) error {
	if p.mapped == nil {
		return f()
	}
	return readMapped(f)
}

// copied is the bytes of the wave's H2D copy.
func (cw *cudaWave) copied() int64 {
	var n int64
	for _, c := range cw.h2d {
		n += int64(len(c.Src))
	}
	return n
}

// h2dCopies lists the copies that fill the staging of the wave buffer at
// base from the slab, whose parts' reads and slab-decoded chunks end at
// meta and whose nvCOMP arguments and assemble ops follow up to used: the
// slab from the first part's start to used in one copy when none of the
// wave's reads is mapped; else, per live part, each mapped read from its
// file's pages (neighbours in both the file and the slab as one copy),
// each run of preads from the slab, and the part's CPU-decoded chunks; and
// the slab from meta to used.
func (cw *cudaWave) h2dCopies(slab []byte, base cuda.DevicePtr, meta, used int64) []cuda.HostCopy {
	live := cw.live()
	mapped := false
	for _, p := range live {
		mapped = mapped || p.mapped != nil
	}
	if !mapped {
		from := cw.parts[0].slabAt
		return []cuda.HostCopy{{Dst: base + cuda.DevicePtr(from), Src: slab[from:used]}}
	}
	var out []cuda.HostCopy
	add := func(dst int64, src []byte) {
		if len(src) > 0 {
			out = append(out, cuda.HostCopy{Dst: base + cuda.DevicePtr(dst), Src: src})
		}
	}
	for _, p := range live {
		end := p.slabAt // where the part's reads end
		if p.mapped == nil {
			if n := len(p.reads); n > 0 {
				end = align(p.reads[n-1].slabOff + p.reads[n-1].length)
			}
			add(p.slabAt, slab[p.slabAt:end])
		} else {
			end = p.mappedCopies(slab, base, &out)
		}
		add(end, slab[end:p.slabEnd])
	}
	add(meta, slab[meta:used])
	return out
}

// mappedCopies appends to out the copies of the part's reads, some mapped,
// and returns where its reads end in the slab.
func (p *wavePart) mappedCopies(slab []byte, base cuda.DevicePtr, out *[]cuda.HostCopy) int64 {
	add := func(dst int64, src []byte) {
		*out = append(*out, cuda.HostCopy{Dst: base + cuda.DevicePtr(dst), Src: src})
	}
	first := len(*out) // copies before first are other parts'
	run := int64(-1)   // start of the run of preads not yet listed
	flush := func(end int64) {
		if run >= 0 {
			add(run, slab[run:end])
			run = -1
		}
	}
	var prev *fileMap // the file of the last copy listed, when mapped
	for i := range p.reads {
		r, f := &p.reads[i], p.mapped[i]
		if f == nil {
			if run < 0 {
				run = r.slabOff
			}
			prev = nil
			continue
		}
		if i > 0 {
			flush(p.reads[i-1].slabOff + p.reads[i-1].length)
		}
		if n := len(*out); prev == f && n > first {
			last := &(*out)[n-1]
			q := &p.reads[i-1]
			gap := r.slabOff - (q.slabOff + q.length)
			if gap >= 0 && gap < 64<<10 && q.offset+q.length+gap == r.offset {
				last.Src = f.data[r.offset-(r.slabOff-int64(last.Dst-base)) : r.offset+r.length]
				continue
			}
		}
		add(r.slabOff, f.data[r.offset:r.offset+r.length])
		prev = f
	}
	end := p.slabAt
	if n := len(p.reads); n > 0 {
		end = p.reads[n-1].slabOff + p.reads[n-1].length
		flush(end)
		end = align(end)
	}
	return end
}
