package ptx

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"testing"
	"unsafe"
)

// TestVectorRow compares the row loops of the row kinds (with AVX2, the
// vector loop and its tail) with the portable loops, and those with the
// generic path's conversions (Float32Bits, the intensity map,
// BFloat16Bits), for every output stride mode (forward, reversed, strided
// either way) and source stride, at every length up to 70, in blocks of
// one to three rows, with and without random intensity maps, on random
// values and every extreme of the source types.
func TestVectorRow(t *testing.T) {
	var b rowBlock // convert_amd64.s reads its fields at these offsets
	offs := []uintptr{unsafe.Offsetof(b.d), unsafe.Offsetof(b.s), unsafe.Offsetof(b.n), unsafe.Offsetof(b.rows),
		unsafe.Offsetof(b.ds), unsafe.Offsetof(b.ss), unsafe.Offsetof(b.dr), unsafe.Offsetof(b.sr)}
	if unsafe.Sizeof(0) == 8 && !slices.Equal(offs, []uintptr{0, 8, 16, 24, 32, 40, 48, 56}) {
		t.Fatalf("rowBlock field offsets %v", offs)
	}
	rng := newRand(t)
	for _, src := range []Dtype{Uint8, Uint16, Int16} {
		for _, out := range []Dtype{Float32, BFloat16} {
			k, ok := rowKindOf(src, out)
			if in, o := k.sizes(); !ok || in != src.Size() || o != out.Size() {
				t.Fatalf("%v -> %v: row kind %d, %v, sizes %d, %d", src, out, k, ok, in, o)
			}
			fast := rowFuncOf(src, out)
			twin := portableRow(src, out)
			isz, osz := src.Size(), out.Size()
			for n := 0; n <= 70; n++ {
				for _, ds := range []int{1, -1, 3, -2, 130} {
					for _, ss := range []int{1, 1, 2} {
						var h hostOp
						if rng.IntN(3) != 0 {
							tf := must(Identity().WithIntensity(randomIntensity(rng)))
							h.intensity = &tf
						}
						// rows rows, the sources one after the other, the
						// outputs interleaved (row r at element r of a
						// stride of rows elements) when ds is not 1 or -1.
						rows := 1 + rng.IntN(3)
						raw := make([]byte, (rows*n*ss+2)*isz)
						for i := range raw {
							raw[i] = byte(rng.Uint32())
						}
						if n > 2 {
							copy(raw[isz:], []byte{0xff, 0x7f, 0x00, 0x80}[:isz])
							copy(raw[isz*(1+ss):], []byte{0xff, 0xff}[:isz])
							copy(raw[isz*(1+2*ss):], []byte{0x00, 0x00}[:isz])
						}
						step, dr := ds*rows, n*abs(ds)
						if ds == 1 || ds == -1 {
							step, dr = ds, n
						} else {
							dr = 1
						}
						span := (rows*n*abs(ds) + rows) * osz
						got, want := bytes.Repeat([]byte{poison}, span+2*osz), bytes.Repeat([]byte{poison}, span+2*osz)
						at := osz
						if ds < 0 && n > 0 {
							at += (n - 1) * abs(step) * osz
						}
						b := rowBlock{s: unsafe.Pointer(&raw[isz]), n: n, rows: rows,
							ds: step * osz, ss: ss * isz, dr: dr * osz, sr: n * ss * isz}
						b.d = unsafe.Pointer(&got[at])
						fast(&h, b)
						b.d = unsafe.Pointer(&want[at])
						twin(&h, b)
						if !bytes.Equal(got, want) {
							t.Fatalf("%v -> %v, n %d, rows %d, strides %d, %d, map %+v: row loop %x, portable loop %x",
								src, out, n, rows, step, ss, h.intensity, got, want)
						}
						// The portable loop against the generic path's
						// conversions.
						for r := range rows {
							for i := range n {
								e := raw[isz*(1+r*n*ss+i*ss):]
								v := uint64(e[0])
								if isz == 2 {
									v = uint64(binary.LittleEndian.Uint16(e))
								}
								f := Float32Bits(src, v)
								if h.intensity != nil {
									f = h.intensity.mapBits(f)
								}
								o := want[at+(r*dr+i*step)*osz:]
								g := uint64(binary.NativeEndian.Uint16(o))
								w := uint64(BFloat16Bits(f))
								if out == Float32 {
									g, w = uint64(binary.NativeEndian.Uint32(o)), uint64(f)
								}
								if g != w {
									t.Fatalf("%v -> %v, map %+v: element %d of row %d, %#x, = %#x; want %#x (%v)",
										src, out, h.intensity, i, r, v, g, w, math.Float32frombits(f))
								}
							}
						}
					}
				}
			}
		}
	}
	if _, ok := rowKindOf(Float32, Float32); ok {
		t.Error("a row kind for float32 sources")
	}
}

func abs(x int) int { return max(x, -x) }

// TestVectorRowStreams runs the row loops on blocks large enough to take
// the non-temporal stores (streams), aligned and not, with and without
// intensity maps, and compares them with the portable loops bit for bit,
// the bytes between the rows untouched.
func TestVectorRowStreams(t *testing.T) {
	rng := newRand(t)
	for _, src := range []Dtype{Uint8, Uint16, Int16} {
		for _, out := range []Dtype{Float32, BFloat16} {
			fast := rowFuncOf(src, out)
			twin := portableRow(src, out)
			isz, osz := src.Size(), out.Size()
			for _, c := range []struct {
				n, pad, shift int // row length, output elements between rows, output start past alignment (bytes)
				wantStream    bool
				rows          int  // 0: enough for streamBytes
				big           bool // part of a large output
			}{
				{256, 0, 0, true, 0, false}, {512, 8, 0, true, 0, false}, {256, 16, 0, true, 0, false},
				{256, 0, osz, false, 0, false}, {252, 4, 0, false, 0, false}, {256, 1, 0, false, 0, false},
				// Small blocks of a large output stream where their rows are
				// whole cache lines.
				{32, 0, 0, true, 4, true}, {32, 32, 0, true, 3, true}, {32, 0, 0, false, 4, false},
				{24, 0, 0, false, 4, true}, {32, 0, 32, false, 4, true}, {32, 8, 0, false, 4, true},
			} {
				for _, mapped := range []bool{false, true} {
					var h hostOp
					if mapped {
						tf := must(Identity().WithIntensity(randomIntensity(rng)))
						h.intensity = &tf
					}
					rows := streamBytes/(c.n*osz) + 3
					if c.rows > 0 {
						rows = c.rows
					}
					raw := make([]byte, rows*c.n*isz)
					for i := range raw {
						raw[i] = byte(rng.Uint32())
					}
					dr := c.n + c.pad
					span := rows*dr*osz + 64
					got, want := bytes.Repeat([]byte{poison}, span+64), bytes.Repeat([]byte{poison}, span+64)
					at := func(buf []byte) unsafe.Pointer {
						off := (64 - int(uintptr(unsafe.Pointer(&buf[0]))%64)) % 64
						return unsafe.Pointer(&buf[off+c.shift])
					}
					b := rowBlock{s: unsafe.Pointer(&raw[0]), n: c.n, rows: rows, ds: osz, ss: isz, dr: dr * osz, sr: c.n * isz, big: c.big}
					b.d = at(got)
					if s := streams(b, osz); s != c.wantStream {
						t.Fatalf("%v -> %v, %+v: streams = %v", src, out, c, s)
					}
					fast(&h, b)
					b.d = at(want)
					twin(&h, b)
					if !bytes.Equal(got, want) {
						i := 0
						for got[i] == want[i] {
							i++
						}
						t.Fatalf("%v -> %v, %+v, map %v: byte %d = %#x, want %#x", src, out, c, mapped, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// portableRow is the portable row loop of a row kind's source type src
// into out, the vector loop's twin.
func portableRow(src, out Dtype) rowFunc {
	switch src {
	case Uint16:
		return floatRow[uint16](out)
	case Int16:
		return floatRow[int16](out)
	}
	return floatRow[uint8](out)
}
