package bench

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

// LabelSpec describes the OME-NGFF label image written beside every image
// of a dataset, at labels/<Name>: blobs of a few label values over 0.
type LabelSpec struct {
	Name  string  `json:"name"`
	Dtype string  `json:"dtype"`
	Chunk []int64 `json:"chunk,omitempty"` // over the image's space axes; nil: the image's
	Shard []int64 `json:"shard,omitempty"` // likewise
	Codec string  `json:"codec"`
	Level int     `json:"level,omitempty"`
	// Foreground is the share of voxels the blobs cover, about.
	Foreground float64 `json:"foreground"`
}

// labelValues is how many label values the blobs take: 1 through it.
const labelValues = 3

// labelSeedStream separates the blobs' draws from the image's.
const labelSeedStream = 0x6461_6d61_6379_0003

// labelCoarsest bounds the voxels of a label image's coarsest level: the
// levels halve the label until it has no more than this (a foreground
// sampler reads that level whole).
const labelCoarsest = 1 << 20

// spaceAxes is the number of space axes of an image of the given rank
// (ngffAxes: the last two or three).
func spaceAxes(rank int) int { return min(rank, 3) }

// labelAxes is the label image's axes: the image's space axes.
func (d *DatasetSpec) labelAxes() []writer.Axis {
	return ngffAxes(len(d.Shape))[len(d.Shape)-spaceAxes(len(d.Shape)):]
}

// labelShape is the label image's shape: the image's space extents.
func (d *DatasetSpec) labelShape() []int64 {
	return d.Shape[len(d.Shape)-spaceAxes(len(d.Shape)):]
}

// labelChunks is the label image's chunk and shard shapes: its own, or
// the image's over the space axes.
func (d *DatasetSpec) labelChunks() (chunk, shard []int64) {
	ns := spaceAxes(len(d.Shape))
	chunk, shard = d.Labels.Chunk, d.Labels.Shard
	if chunk == nil {
		chunk = d.Chunk[len(d.Chunk)-ns:]
	}
	if shard == nil && d.Labels.Chunk == nil && d.Shard != nil {
		shard = d.Shard[len(d.Shard)-ns:]
	}
	return chunk, shard
}

// labelLevels is the number of levels of the label image: halving its
// space axes until it has at most labelCoarsest voxels.
func labelLevels(shape []int64) int {
	s := slices.Clone(shape)
	levels := 1
	for levels < 32 {
		v := int64(1)
		for _, n := range s {
			v *= n
		}
		if v <= labelCoarsest || slices.Max(s) == 1 {
			break
		}
		for i := range s {
			s[i] = (s[i] + 1) / 2
		}
		levels++
	}
	return levels
}

// validateLabels checks dataset.labels; the first bad field is returned
// as a *ScenarioError.
func (d *DatasetSpec) validateLabels() error {
	l := d.Labels
	if l.Name == "" {
		return fieldErr("dataset.labels.name", "missing")
	}
	if !validName(l.Name) {
		return fieldErr("dataset.labels.name", "%q: use letters, digits, '-', '_' and '.' only", l.Name)
	}
	dt, err := zarr.ParseDataType(l.Dtype)
	if err != nil || dt.IsFloat() || dt == zarr.Bool {
		return fieldErr("dataset.labels.dtype", "%q: want an integer zarr data type (uint8, uint16, int32, ...)", l.Dtype)
	}
	for i := range d.Arrays {
		if t, _ := zarr.ParseDataType(d.Dtype.At(i)); t == zarr.Bool || t == zarr.Float16 {
			return fieldErr(listField("dataset.dtype", d.Dtype, i%len(d.Dtype)), "%v: an image with labels is brightened inside the blobs, which needs an integer, float32 or float64 image", t)
		}
	}
	ns := spaceAxes(len(d.Shape))
	shape := func(field string, s []int64) error {
		if len(s) != ns {
			return fieldErr(field, "has %d axes; want the image's %d space axes", len(s), ns)
		}
		return checkShape(field, s, ns)
	}
	if l.Chunk != nil {
		if err := shape("dataset.labels.chunk", l.Chunk); err != nil {
			return err
		}
	}
	if l.Shard != nil {
		if l.Chunk == nil {
			return fieldErr("dataset.labels.shard", "needs dataset.labels.chunk")
		}
		if err := shape("dataset.labels.shard", l.Shard); err != nil {
			return err
		}
		for i := range l.Shard {
			if l.Shard[i]%l.Chunk[i] != 0 {
				return fieldErr(fmt.Sprintf("dataset.labels.shard[%d]", i), "%d is not a multiple of dataset.labels.chunk[%d] = %d", l.Shard[i], i, l.Chunk[i])
			}
		}
	}
	if _, err := compressionOf("dataset.labels.codec", "dataset.labels.level", l.Codec, l.Level, "", false); err != nil {
		return err
	}
	if !(l.Foreground > 0 && l.Foreground <= 0.9) {
		return fieldErr("dataset.labels.foreground", "%v: must be in (0, 0.9]", l.Foreground)
	}
	return nil
}

// validName reports whether s is a name of letters, digits, '-', '_'
// and '.'.
func validName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return s != ""
}

// labelSpec is the NGFF spec of the label image of every image.
func (d *DatasetSpec) labelSpec() (writer.NGFFSpec, error) {
	l := d.Labels
	dt, err := zarr.ParseDataType(l.Dtype)
	if err != nil {
		return writer.NGFFSpec{}, fieldErr("dataset.labels.dtype", "%v", err)
	}
	comp, err := compressionOf("dataset.labels.codec", "dataset.labels.level", l.Codec, l.Level, "", false)
	if err != nil {
		return writer.NGFFSpec{}, err
	}
	chunk, shard := d.labelChunks()
	return writer.NGFFSpec{
		Name:         l.Name,
		Axes:         d.labelAxes(),
		Levels:       labelLevels(d.labelShape()),
		Downsampling: writer.Nearest,
		Array:        writer.Spec{Shape: d.labelShape(), ChunkShape: chunk, ShardShape: shard, DataType: dt, Compression: comp},
	}, nil
}

// labelDir is where image dir's label image is written.
func labelDir(imageDir, name string) string { return filepath.Join(imageDir, "labels", name) }

// markLabelImage makes the multiscale image at labels/<name> of imageDir
// an OME-NGFF 0.5 image-label: its group lists it (labels/zarr.json) and
// its own zarr.json gains "image-label" metadata (a colour per label
// value, and the image as its source).
func markLabelImage(imageDir, name string) error {
	group, err := json.MarshalIndent(map[string]any{
		"zarr_format": 3, "node_type": "group",
		"attributes": map[string]any{"ome": map[string]any{"version": "0.5", "labels": []string{name}}},
	}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(imageDir, "labels", "zarr.json"), append(group, '\n'), 0o644); err != nil {
		return err
	}
	file := filepath.Join(labelDir(imageDir, name), "zarr.json")
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var meta struct {
		ZarrFormat int    `json:"zarr_format"`
		NodeType   string `json:"node_type"`
		Attributes struct {
			OME map[string]any `json:"ome"`
		} `json:"attributes"`
	}
	if err := json.Unmarshal(b, &meta); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	colors := make([]map[string]any, labelValues)
	for v := range labelValues {
		rgba := [4]int{0, 0, 0, 255}
		rgba[v%3] = 255
		colors[v] = map[string]any{"label-value": v + 1, "rgba": rgba}
	}
	meta.Attributes.OME["image-label"] = map[string]any{"colors": colors, "source": map[string]any{"image": "../../"}}
	out, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(out, '\n'), 0o644)
}

// blob is an axis-aligned ellipsoid of one label value: the voxels p with
// sum over axes of ((p - c) / r)^2 <= 1, tested in integers. A 2-D image
// has one z plane: c[0] = 0, r[0] = 1.
type blob struct {
	c, r [3]int64
	v    byte
}

// blobs is an image's blobs, in the order they are painted: a later blob
// overwrites an earlier one where they overlap.
type blobs struct {
	shape [3]int64 // the space axes, z extent 1 for a 2-D image
	list  []blob
}

// splitmix is the splitmix64 generator the blobs are drawn with: the
// same seed gives the same blobs with every Go release.
type splitmix struct{ s uint64 }

func (g *splitmix) next() uint64 {
	g.s += 0x9e3779b97f4a7c15
	z := g.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// in returns a number in [lo, hi].
func (g *splitmix) in(lo, hi int64) int64 { return lo + int64(g.next()%uint64(hi-lo+1)) }

// newBlobs draws the blobs of an image of the given space shape (2 or 3
// axes) from seed: random centres, radii of a sixteenth of the smallest
// extent and down to a third of that (2 to 64 voxels), and label values
// 1..labelValues, until their volumes add up to what covers about
// fraction of the voxels when placed at random (-ln(1 - fraction) of the
// volume).
func newBlobs(space []int64, fraction float64, seed uint64) *blobs {
	b := &blobs{shape: [3]int64{1, 1, 1}}
	copy(b.shape[3-len(space):], space)
	rmax := min(max(slices.Min(space)/16, 2), 64)
	rmin := max(1, rmax/3)
	volume := float64(b.shape[0]) * float64(b.shape[1]) * float64(b.shape[2])
	target := -math.Log1p(-fraction) * volume
	g := &splitmix{s: seed ^ labelSeedStream}
	for sum := 0.0; sum < target; {
		var bl blob
		for d := range 3 {
			bl.c[d], bl.r[d] = 0, 1
			if d >= 3-len(space) {
				bl.c[d] = g.in(0, b.shape[d]-1)
				bl.r[d] = g.in(rmin, rmax)
			}
		}
		bl.v = byte(g.in(1, labelValues))
		// Each product rounded (explicit conversions), so that no
		// platform fuses the last one with the sum.
		v := float64(math.Pi * float64(bl.r[1]) * float64(bl.r[2]))
		if len(space) == 3 {
			v = float64(4.0 / 3 * v * float64(bl.r[0]))
		}
		sum += v
		b.list = append(b.list, bl)
	}
	return b
}

// paint writes the label values of box (the space axes) into mask, one
// byte per voxel in C order, 0 outside every blob.
func (b *blobs) paint(mask []byte, box []zarr.Range) {
	var lo, hi [3]int64
	lo, hi = [3]int64{0, 0, 0}, [3]int64{1, 1, 1}
	for i, r := range box {
		lo[3-len(box)+i], hi[3-len(box)+i] = r.Start, r.Stop
	}
	ny, nx := hi[1]-lo[1], hi[2]-lo[2]
	clear(mask[:(hi[0]-lo[0])*ny*nx])
	for _, bl := range b.list {
		var from, to [3]int64
		empty := false
		for d := range 3 {
			from[d], to[d] = max(bl.c[d]-bl.r[d], lo[d]), min(bl.c[d]+bl.r[d]+1, hi[d])
			empty = empty || from[d] >= to[d]
		}
		if empty {
			continue
		}
		// (dz/rz)^2 + (dy/ry)^2 + (dx/rx)^2 <= 1, times (rz*ry*rx)^2.
		rz, ry, rx := bl.r[0], bl.r[1], bl.r[2]
		wz, wy, wx := (ry*rx)*(ry*rx), (rz*rx)*(rz*rx), (rz*ry)*(rz*ry)
		q := (rz * ry * rx) * (rz * ry * rx)
		for z := from[0]; z < to[0]; z++ {
			dz := z - bl.c[0]
			for y := from[1]; y < to[1]; y++ {
				dy := y - bl.c[1]
				rest := q - dz*dz*wz - dy*dy*wy
				if rest < 0 {
					continue
				}
				w := isqrt(rest / wx) // the largest |dx| inside
				row := ((z-lo[0])*ny + (y - lo[1])) * nx
				for x := max(bl.c[2]-w, from[2]); x < min(bl.c[2]+w+1, to[2]); x++ {
					mask[row+x-lo[2]] = bl.v
				}
			}
		}
	}
}

// isqrt returns the largest integer whose square is at most n >= 0.
func isqrt(n int64) int64 {
	r := int64(math.Sqrt(float64(n)))
	for r*r > n {
		r--
	}
	for (r+1)*(r+1) <= n {
		r++
	}
	return r
}

// putLabels writes mask's values as elements of the integer type dt,
// little-endian, into dst.
func putLabels(dst []byte, dt zarr.DataType, mask []byte) {
	switch dt.Size() {
	case 1:
		copy(dst, mask)
	case 2:
		for i, v := range mask {
			binary.LittleEndian.PutUint16(dst[2*i:], uint16(v))
		}
	case 4:
		for i, v := range mask {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(v))
		}
	default:
		for i, v := range mask {
			binary.LittleEndian.PutUint64(dst[8*i:], uint64(v))
		}
	}
}

// brighten raises the elements of data (type dt, little-endian, C order)
// whose voxel is inside a blob: mask covers the box's space axes, which
// are its last ones, so element e's voxel is mask[e % len(mask)]. An
// unsigned value v becomes v/2 + 2^(bits-1) (the upper half of the
// range), a signed one v/2 + 2^(bits-2) (non-negative), a float v/2 + 0.5
// ([-1, 1] onto [0, 1]).
func brighten(data []byte, dt zarr.DataType, mask []byte) {
	size := dt.Size()
	n := len(data) / size
	for e := range n {
		if mask[e%len(mask)] == 0 {
			continue
		}
		b := data[e*size:]
		switch dt {
		case zarr.Uint8:
			b[0] = b[0]>>1 | 0x80
		case zarr.Int8:
			b[0] = byte(int8(b[0])>>1 + 1<<6)
		case zarr.Uint16:
			binary.LittleEndian.PutUint16(b, binary.LittleEndian.Uint16(b)>>1|1<<15)
		case zarr.Int16:
			binary.LittleEndian.PutUint16(b, uint16(int16(binary.LittleEndian.Uint16(b))>>1+1<<14))
		case zarr.Uint32:
			binary.LittleEndian.PutUint32(b, binary.LittleEndian.Uint32(b)>>1|1<<31)
		case zarr.Int32:
			binary.LittleEndian.PutUint32(b, uint32(int32(binary.LittleEndian.Uint32(b))>>1+1<<30))
		case zarr.Uint64:
			binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)>>1|1<<63)
		case zarr.Int64:
			binary.LittleEndian.PutUint64(b, uint64(int64(binary.LittleEndian.Uint64(b))>>1+1<<62))
		case zarr.Float32:
			// The conversions keep the halving and the add two
			// operations, so that no platform fuses them.
			f := math.Float32frombits(binary.LittleEndian.Uint32(b))
			binary.LittleEndian.PutUint32(b, math.Float32bits(float32(f/2)+0.5))
		case zarr.Float64:
			f := math.Float64frombits(binary.LittleEndian.Uint64(b))
			binary.LittleEndian.PutUint64(b, math.Float64bits(float64(f/2)+0.5))
		}
	}
}
