package pipeline

import "github.com/damacy-go/damacy/cuda"

// releaseMaps gives back the mappings a wave's reads held.
func (e *cudaEngine) releaseMaps(cw *cudaWave) {
	for _, p := range cw.parts {
		e.stages.releaseMaps(p.wave)
	}
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
