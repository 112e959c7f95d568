package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/ptx"
	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/remote"
)

var cmdInspect = &command{
	name:  "inspect",
	usage: "inspect [--json] PATH",
	short: "describe a zarr array or OME-NGFF image",
	long: `Inspect describes the zarr array or OME-NGFF image at PATH (zarr v3 or v2;
OME-NGFF 0.4 or 0.5): format, shape, data type and byte order, chunk and
shard shapes, codecs with their configurations, fill value, dimension names,
and for an image its axes and levels with their scales and translations.

It then reads every shard index (or stats every chunk of an unsharded array)
and reports the objects and chunks stored, the bytes on disk, and the
compression ratio of the stored chunks: their decoded size over their stored
size, as the shard indexes give them. Missing chunks and shards read as the
fill value and count in neither.

` + uriHelp + `

Examples:
  damacy inspect /data/image.ome.zarr
  damacy inspect --json /data/image.ome.zarr/0
  damacy inspect https://example.org/data/image.ome.zarr`,
	setup: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		asJSON := fs.Bool("json", false, "write JSON instead of text")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 1 {
				return usagef("want one path, got %d arguments", len(args))
			}
			r, err := inspectPath(ctx, args[0])
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(e.stdout, r)
			}
			r.writeText(e.stdout)
			return nil
		}
	},
}

// inspectResult is what inspect reports about a path.
type inspectResult struct {
	Path  string     `json:"path"`
	Node  string     `json:"node"` // "array" or "multiscale"
	NGFF  *ngffInfo  `json:"ngff,omitempty"`
	Array *arrayInfo `json:"array,omitempty"`
}

type ngffInfo struct {
	Version string      `json:"version"`
	Name    string      `json:"name,omitempty"`
	Axes    []axisInfo  `json:"axes"`
	Levels  []levelInfo `json:"levels"`
	Storage storageInfo `json:"storage"` // all levels together
}

type axisInfo struct {
	Name string `json:"name"`
	Type string `json:"type,omitempty"`
	Unit string `json:"unit,omitempty"`
}

type levelInfo struct {
	Path        string     `json:"path"`
	Scale       []float64  `json:"scale"`
	Translation []float64  `json:"translation"`
	Array       *arrayInfo `json:"array"`
}

type arrayInfo struct {
	Format         int         `json:"zarr_format"`
	Shape          []int64     `json:"shape"`
	DataType       string      `json:"data_type"`
	Endian         string      `json:"endian,omitempty"` // multi-byte types only
	ChunkShape     []int64     `json:"chunk_shape"`
	ShardShape     []int64     `json:"shard_shape,omitempty"` // sharded arrays only
	GridShape      []int64     `json:"grid_shape"`            // shards (or chunks) per axis
	Codecs         string      `json:"codecs"`
	CodecConfig    any         `json:"codec_config"` // the metadata's codecs (v3) or compressor and filters (v2)
	FillValue      string      `json:"fill_value"`
	DimensionNames []string    `json:"dimension_names,omitempty"`
	Storage        storageInfo `json:"storage"`
}

// storageInfo is what the stored objects and shard indexes say.
type storageInfo struct {
	Objects      int64   `json:"objects"`       // shard (or chunk) objects present
	ObjectsTotal int64   `json:"objects_total"` // grid cells
	Chunks       int64   `json:"chunks"`        // stored chunks
	ChunksTotal  int64   `json:"chunks_total"`  // chunks the grid holds
	DiskBytes    int64   `json:"disk_bytes"`    // sizes of the objects present
	StoredBytes  int64   `json:"stored_bytes"`  // bytes of the stored chunks
	DecodedBytes int64   `json:"decoded_bytes"` // their decoded size
	Compression  float64 `json:"compression"`   // DecodedBytes / StoredBytes; 0 when nothing is stored
}

func (s *storageInfo) add(o storageInfo) {
	s.Objects += o.Objects
	s.ObjectsTotal += o.ObjectsTotal
	s.Chunks += o.Chunks
	s.ChunksTotal += o.ChunksTotal
	s.DiskBytes += o.DiskBytes
	s.StoredBytes += o.StoredBytes
	s.DecodedBytes += o.DecodedBytes
	s.Compression = base.Ratio(s.DecodedBytes, s.StoredBytes)
}

// inspectPath describes the array or OME-NGFF image at path.
func inspectPath(ctx context.Context, path string) (*inspectResult, error) {
	st, p, done, err := openURI(ctx, path)
	if err != nil {
		return nil, err
	}
	defer done()
	kind, err := zarr.InspectStore(st, p)
	if err != nil {
		return nil, err
	}
	r := &inspectResult{Path: remote.Redact(path), Node: kind.String()}
	switch kind {
	case zarr.NodeArray:
		a, err := zarr.OpenStore(st, p)
		if err != nil {
			return nil, err
		}
		if r.Array, err = describeArray(ctx, a); err != nil {
			return nil, err
		}
	case zarr.NodeMultiscale:
		m, err := zarr.OpenNGFFStore(st, p)
		if err != nil {
			return nil, err
		}
		n := &ngffInfo{Version: m.Version(), Name: m.Name()}
		for _, ax := range m.Axes() {
			n.Axes = append(n.Axes, axisInfo(ax))
		}
		for k, lv := range m.Levels() {
			a, err := m.Level(k)
			if err != nil {
				return nil, err
			}
			ai, err := describeArray(ctx, a)
			if err != nil {
				return nil, err
			}
			n.Levels = append(n.Levels, levelInfo{Path: lv.Path, Scale: lv.Scale, Translation: lv.Translation, Array: ai})
			n.Storage.add(ai.Storage)
		}
		r.NGFF = n
	default:
		return nil, fmt.Errorf("%s is a zarr group without OME-NGFF multiscales: name one of its arrays", path)
	}
	return r, nil
}

func describeArray(ctx context.Context, a *zarr.Array) (*arrayInfo, error) {
	ai := &arrayInfo{
		Format:         a.ZarrFormat(),
		Shape:          a.Shape(),
		DataType:       a.DataType().String(),
		ChunkShape:     a.ChunkShape(),
		GridShape:      a.GridShape(),
		Codecs:         a.Codec().String(),
		FillValue:      formatFill(a.DataType(), a.FillValue()),
		DimensionNames: a.DimensionNames(),
	}
	if sh := a.Codec().Sharding(); sh != nil && !a.Codec().Leaf() {
		ai.ShardShape = a.ShardShape()
	}
	if a.DataType().Size() > 1 {
		ai.Endian = leafCodec(a.Codec()).Layout().Endian.String()
	}
	cfg, err := codecConfig(a)
	if err != nil {
		return nil, err
	}
	ai.CodecConfig = cfg
	if ai.Storage, err = scanStorage(ctx, a); err != nil {
		return nil, err
	}
	return ai, nil
}

// leafCodec follows sharding codecs down to the chain that decodes chunks.
func leafCodec(c *zarr.ChunkCodec) *zarr.ChunkCodec {
	for !c.Leaf() {
		c = c.Sharding().Inner()
	}
	return c
}

// codecConfig returns the codec part of the array's metadata document as
// written: the v3 "codecs" list, or the v2 compressor, filters and order.
func codecConfig(a *zarr.Array) (any, error) {
	doc, err := zarr.ReadAll(a.Store(), a.MetadataKey())
	if err != nil {
		return nil, err
	}
	if a.ZarrFormat() == 3 {
		m, err := zarr.ParseArrayMetadataV3(doc)
		if err != nil {
			return nil, err
		}
		return m.Codecs, nil
	}
	m, err := zarr.ParseArrayMetadataV2(doc)
	if err != nil {
		return nil, err
	}
	return v2Codecs{m.Order, m.Filters, m.Compressor}, nil
}

// v2Codecs is the codec part of a zarr v2 .zarray document.
type v2Codecs struct {
	Order      string               `json:"order"`
	Filters    []zarr.CodecConfigV2 `json:"filters"`
	Compressor *zarr.CodecConfigV2  `json:"compressor"`
}

// scanWorkers is how many objects inspect stats or reads indexes of at once
// (network filesystems reward a few requests in flight).
const scanWorkers = 16

// scanStorage stats every grid cell's object and, for a sharded array,
// reads its shard index.
func scanStorage(ctx context.Context, a *zarr.Array) (storageInfo, error) {
	grid := a.GridShape()
	cells := int64(1)
	for _, n := range grid {
		cells *= n
	}
	c := a.Codec()
	st := a.Store()
	var sh *zarr.Sharding
	if s := c.Sharding(); s != nil && !c.Leaf() {
		sh = s
	}
	perObject := int64(1)
	unit := a.ShardShape()
	if sh != nil {
		for _, n := range sh.GridShape() {
			perObject *= n
		}
		unit = sh.ChunkShape()
	}
	unitBytes := int64(a.DataType().Size())
	for _, n := range unit {
		unitBytes *= n
	}
	// Decoded bytes of a whole-object cell: a sharding codec wrapped in
	// other codecs decodes whole.
	if sh == nil {
		unitBytes = int64(c.Layout().Bytes())
	}
	out := storageInfo{ObjectsTotal: cells, ChunksTotal: cells * perObject}
	var mu sync.Mutex
	var next int64
	var firstErr error
	var wg sync.WaitGroup
	for range min(int64(scanWorkers), cells) {
		wg.Go(func() {
			var part storageInfo
			g := make([]int64, len(grid))
			for {
				mu.Lock()
				i := next
				next++
				stop := firstErr != nil || ctx.Err() != nil
				mu.Unlock()
				if i >= cells || stop {
					break
				}
				n := i
				for d := len(grid) - 1; d >= 0; d-- {
					g[d] = n % grid[d]
					n /= grid[d]
				}
				key := a.ChunkKey(g)
				size, err := st.Size(key)
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err == nil && sh != nil {
					var idx *zarr.ShardIndex
					idx, err = zarr.ReadShardIndex(st, sh, zarr.Extent{Key: key, Length: size})
					if err == nil && idx != nil {
						for _, en := range idx.Entries {
							if !en.Empty() {
								part.Chunks++
								part.StoredBytes += en.Length
								part.DecodedBytes += unitBytes
							}
						}
					}
				} else if err == nil {
					part.Chunks++
					part.StoredBytes += size
					part.DecodedBytes += unitBytes
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					break
				}
				part.Objects++
				part.DiskBytes += size
			}
			mu.Lock()
			out.add(part)
			mu.Unlock()
		})
	}
	wg.Wait()
	if firstErr != nil {
		return storageInfo{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return storageInfo{}, err
	}
	out.Compression = base.Ratio(out.DecodedBytes, out.StoredBytes)
	return out, nil
}

// formatFill writes one little-endian element of type dt as zarr writes
// fill values: numbers, true/false, "NaN", "Infinity", "-Infinity".
func formatFill(dt zarr.DataType, b []byte) string {
	var v uint64
	var buf [8]byte
	copy(buf[:], b)
	v = binary.LittleEndian.Uint64(buf[:])
	switch dt {
	case zarr.Bool:
		return strconv.FormatBool(v != 0)
	case zarr.Int8:
		return strconv.FormatInt(int64(int8(v)), 10)
	case zarr.Int16:
		return strconv.FormatInt(int64(int16(v)), 10)
	case zarr.Int32:
		return strconv.FormatInt(int64(int32(v)), 10)
	case zarr.Int64:
		return strconv.FormatInt(int64(v), 10)
	case zarr.Uint8, zarr.Uint16, zarr.Uint32, zarr.Uint64:
		return strconv.FormatUint(v, 10)
	case zarr.Float16:
		return formatFloat(float64(math.Float32frombits(ptx.Float32Bits(ptx.Float16, v))), 32)
	case zarr.Float32:
		return formatFloat(float64(math.Float32frombits(uint32(v))), 32)
	case zarr.Float64:
		return formatFloat(math.Float64frombits(v), 64)
	}
	return fmt.Sprintf("0x%x", v)
}

func formatFloat(f float64, bits int) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}

// codecChain renders a v3 codecs list with its configurations:
// "bytes(endian=little) -> zstd(checksum=false, level=3)"; the nested
// chains of sharding_indexed are rendered in brackets.
func codecChain(exts []zarr.Extension) string {
	parts := make([]string, len(exts))
	for i, e := range exts {
		parts[i] = e.Name + codecArgs(e.Configuration)
	}
	return strings.Join(parts, " -> ")
}

func codecArgs(cfg json.RawMessage) string {
	var m map[string]json.RawMessage
	if len(cfg) == 0 || json.Unmarshal(cfg, &m) != nil || len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('(')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
		b.WriteByte('=')
		var nested []zarr.Extension
		if (k == "codecs" || k == "index_codecs") && json.Unmarshal(m[k], &nested) == nil {
			b.WriteString("[" + codecChain(nested) + "]")
			continue
		}
		b.WriteString(compactJSON(m[k]))
	}
	b.WriteByte(')')
	return b.String()
}

func compactJSON(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

// v2Chain renders a zarr v2 array's filters and compressor.
func v2Chain(order string, filters []zarr.CodecConfigV2, comp *zarr.CodecConfigV2) string {
	parts := []string{"order " + order}
	render := func(c zarr.CodecConfigV2) string {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(c.Config, &m)
		delete(m, "id")
		b, _ := json.Marshal(m)
		return c.ID + codecArgs(b)
	}
	for _, f := range filters {
		parts = append(parts, render(f))
	}
	if comp != nil {
		parts = append(parts, render(*comp))
	}
	return strings.Join(parts, " -> ")
}

func (r *inspectResult) writeText(w io.Writer) {
	fmt.Fprintf(w, "path:         %s\n", r.Path)
	if r.Array != nil {
		fmt.Fprintf(w, "node:         array\n")
		r.Array.writeText(w, "")
		return
	}
	n := r.NGFF
	fmt.Fprintf(w, "node:         OME-NGFF %s multiscale image\n", n.Version)
	if n.Name != "" {
		fmt.Fprintf(w, "name:         %s\n", n.Name)
	}
	axes := make([]string, len(n.Axes))
	for i, a := range n.Axes {
		var attrs []string
		for _, s := range []string{a.Type, a.Unit} {
			if s != "" {
				attrs = append(attrs, s)
			}
		}
		axes[i] = a.Name
		if len(attrs) > 0 {
			axes[i] += " (" + strings.Join(attrs, ", ") + ")"
		}
	}
	fmt.Fprintf(w, "axes:         %s\n", strings.Join(axes, ", "))
	fmt.Fprintf(w, "levels:       %d\n", len(n.Levels))
	writeStorage(w, "", n.Storage)
	for k, lv := range n.Levels {
		fmt.Fprintf(w, "level %d:      path %q, scale %s, translation %s\n", k, lv.Path, floats(lv.Scale), floats(lv.Translation))
		lv.Array.writeText(w, "  ")
	}
}

func (a *arrayInfo) writeText(w io.Writer, in string) {
	pad := func(label string) string { return in + fmt.Sprintf("%-14s", label+":") }
	fmt.Fprintf(w, "%s%s\n", pad("format"), "zarr v"+strconv.Itoa(a.Format))
	fmt.Fprintf(w, "%s%s\n", pad("shape"), base.Shape(a.Shape))
	dt := a.DataType
	if a.Endian != "" {
		dt += " (" + a.Endian + "-endian)"
	}
	fmt.Fprintf(w, "%s%s\n", pad("data type"), dt)
	fmt.Fprintf(w, "%s%s\n", pad("chunk shape"), base.Shape(a.ChunkShape))
	if a.ShardShape != nil {
		fmt.Fprintf(w, "%s%s (grid %s)\n", pad("shard shape"), base.Shape(a.ShardShape), base.Shape(a.GridShape))
	} else {
		fmt.Fprintf(w, "%s%s\n", pad("chunk grid"), base.Shape(a.GridShape))
	}
	switch cfg := a.CodecConfig.(type) {
	case []zarr.Extension:
		fmt.Fprintf(w, "%s%s\n", pad("codecs"), codecChain(cfg))
	case v2Codecs:
		fmt.Fprintf(w, "%s%s\n", pad("codecs"), v2Chain(cfg.Order, cfg.Filters, cfg.Compressor))
	default:
		fmt.Fprintf(w, "%s%s\n", pad("codecs"), a.Codecs)
	}
	fmt.Fprintf(w, "%s%s\n", pad("fill value"), a.FillValue)
	if slices.ContainsFunc(a.DimensionNames, func(s string) bool { return s != "" }) {
		fmt.Fprintf(w, "%s%s\n", pad("dimensions"), strings.Join(a.DimensionNames, ", "))
	}
	writeStorage(w, in, a.Storage)
}

func writeStorage(w io.Writer, in string, s storageInfo) {
	fmt.Fprintf(w, "%s%-14s%d of %d objects, %d of %d chunks stored\n", in, "stored:", s.Objects, s.ObjectsTotal, s.Chunks, s.ChunksTotal)
	fmt.Fprintf(w, "%s%-14s%d bytes (%s)\n", in, "on disk:", s.DiskBytes, base.FormatBytes(s.DiskBytes))
	if s.StoredBytes > 0 {
		fmt.Fprintf(w, "%s%-14s%.3f (%d decoded / %d stored chunk bytes)\n", in, "compression:", s.Compression, s.DecodedBytes, s.StoredBytes)
	} else {
		fmt.Fprintf(w, "%s%-14snothing stored\n", in, "compression:")
	}
}

func floats(s []float64) string {
	p := make([]string, len(s))
	for i, v := range s {
		p[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return "[" + strings.Join(p, ", ") + "]"
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
