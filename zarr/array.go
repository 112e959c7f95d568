package zarr

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// Array is an opened zarr array (v3, or v2). It holds the parsed metadata
// and the store; it caches nothing else, and is safe for concurrent use.
type Array struct {
	store   Store
	path    string // node path within the store; "" for the root
	metaKey string // key of the metadata document
	info    *arrayInfo
	leaf    []int64 // innermost chunk shape
}

// Open opens the array stored in the local directory path, zarr v3
// (zarr.json) or v2 (.zarray).
func Open(path string) (*Array, error) {
	s, err := NewDirStore(path)
	if err != nil {
		return nil, err
	}
	return OpenStore(s, "")
}

// OpenStore opens the array at path ("" for the root) in s. It reads
// path/zarr.json, or for zarr v2 path/.zarray and path/.zattrs. Errors:
// ErrNotFound when there is no array there (a group is not an array), a
// *MetadataError for metadata that is malformed or unsupported.
func OpenStore(s Store, path string) (*Array, error) {
	p, err := cleanPath(path)
	if err != nil {
		return nil, err
	}
	n, err := readNode(s, p)
	if err != nil {
		return nil, err
	}
	if n.kind != NodeArray {
		return nil, fmt.Errorf("zarr: %s: %w: no array here (found a group)", n.key, ErrNotFound)
	}
	var info *arrayInfo
	if n.format == 3 {
		m, err := ParseArrayMetadataV3(n.doc)
		if err != nil {
			return nil, withKey(err, n.key)
		}
		info, err = m.resolve(n.key)
		if err != nil {
			return nil, err
		}
	} else {
		m, err := ParseArrayMetadataV2(n.doc)
		if err != nil {
			return nil, withKey(err, n.key)
		}
		if info, err = m.resolve(n.key); err != nil {
			return nil, err
		}
		info.attrs = n.attrs
	}
	a := &Array{store: s, path: p, metaKey: n.key, info: info}
	c := info.codec
	for !c.Leaf() {
		c = c.sharding.inner
	}
	a.leaf = slices.Clone(c.layout.Shape)
	return a, nil
}

// NodeKind says what a path in a hierarchy holds.
type NodeKind uint8

// Node kinds.
const (
	NodeArray      NodeKind = iota + 1 // an array
	NodeGroup                          // a group without OME-NGFF multiscales
	NodeMultiscale                     // a group with OME-NGFF multiscales (0.4 or 0.5): open it with OpenNGFF
)

// String returns "array", "group" or "multiscale".
func (k NodeKind) String() string {
	switch k {
	case NodeArray:
		return "array"
	case NodeGroup:
		return "group"
	case NodeMultiscale:
		return "multiscale"
	}
	return fmt.Sprintf("NodeKind(%d)", int(k))
}

// Inspect reports what the local directory path holds, reading only its
// metadata: an array, an OME-NGFF multiscale group, or another group.
// It fails with ErrNotFound when path holds no zarr node.
func Inspect(path string) (NodeKind, error) {
	s, err := NewDirStore(path)
	if err != nil {
		return 0, err
	}
	return InspectStore(s, "")
}

// InspectStore is Inspect for the node at path in s.
func InspectStore(s Store, path string) (NodeKind, error) {
	p, err := cleanPath(path)
	if err != nil {
		return 0, err
	}
	n, err := readNode(s, p)
	if err != nil {
		return 0, err
	}
	if n.kind == NodeGroup {
		if _, ok, err := multiscalesAttr(n); err != nil {
			return 0, err
		} else if ok {
			return NodeMultiscale, nil
		}
	}
	return n.kind, nil
}

// node is a hierarchy node's metadata as read from a store.
type node struct {
	kind     NodeKind // NodeArray or NodeGroup
	format   int      // 2 or 3
	key      string   // key of the main document (zarr.json, .zarray or .zgroup)
	doc      []byte   // its content
	attrs    json.RawMessage
	attrsKey string // key of the document holding attrs
}

// readNode reads the metadata of the node at p: zarr.json first, then the
// v2 documents.
func readNode(s Store, p string) (*node, error) {
	key := joinKey(p, v3MetaKey)
	doc, err := readAllMax(s, key, maxMetadataBytes)
	if err == nil {
		var head struct {
			ZarrFormat int             `json:"zarr_format"`
			NodeType   string          `json:"node_type"`
			Attributes json.RawMessage `json:"attributes"`
		}
		if err := json.Unmarshal(doc, &head); err != nil {
			return nil, metaErr(key, "", jsonReason(err))
		}
		if head.ZarrFormat != 3 {
			return nil, metaErr(key, "zarr_format", malformed("zarr_format is %d, want 3", head.ZarrFormat))
		}
		n := &node{format: 3, key: key, doc: doc, attrs: head.Attributes, attrsKey: key}
		switch head.NodeType {
		case "array":
			n.kind = NodeArray
		case "group":
			n.kind = NodeGroup
		default:
			return nil, metaErr(key, "node_type", malformed("node_type %q is neither \"array\" nor \"group\"", head.NodeType))
		}
		return n, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	attrs, err := readAttrsV2(s, p)
	if err != nil {
		return nil, err
	}
	for _, c := range []struct {
		name string
		kind NodeKind
	}{{v2ArrayKey, NodeArray}, {v2GroupKey, NodeGroup}} {
		key := joinKey(p, c.name)
		doc, err := readAllMax(s, key, maxMetadataBytes)
		if err == nil {
			return &node{kind: c.kind, format: 2, key: key, doc: doc, attrs: attrs, attrsKey: joinKey(p, v2AttrsKey)}, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	where := p
	switch st := s.(type) {
	case *DirStore:
		if p == "" {
			where = st.Root()
		}
	case interface{ URI(key string) string }: // an object store names the whole URI
		where = strings.TrimSuffix(st.URI(p), "/")
	}
	if where == "" { // the root of a store the caller names
		return nil, fmt.Errorf("zarr: %w: no zarr.json, .zarray or .zgroup", ErrNotFound)
	}
	return nil, fmt.Errorf("zarr: %s: %w: no zarr.json, .zarray or .zgroup", where, ErrNotFound)
}

// readAttrsV2 reads a v2 node's .zattrs; an absent file means no
// attributes.
func readAttrsV2(s Store, p string) (json.RawMessage, error) {
	key := joinKey(p, v2AttrsKey)
	b, err := readAllMax(s, key, maxMetadataBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) || !isObject(b) {
		return nil, metaErr(key, "", malformed("attributes are not a JSON object"))
	}
	return b, nil
}

// Store returns the store the array reads from.
func (a *Array) Store() Store { return a.store }

// Path returns the array's path within its store ("" for the root).
func (a *Array) Path() string { return a.path }

// MetadataKey returns the store key of the array's metadata document
// (zarr.json or .zarray).
func (a *Array) MetadataKey() string { return a.metaKey }

// ZarrFormat returns 3 or 2.
func (a *Array) ZarrFormat() int { return a.info.zarrFormat }

// Shape returns the array's shape.
func (a *Array) Shape() []int64 { return slices.Clone(a.info.shape) }

// Rank returns the number of dimensions.
func (a *Array) Rank() int { return len(a.info.shape) }

// DataType returns the element type.
func (a *Array) DataType() DataType { return a.info.dtype }

// FillValue returns the fill value as one little-endian element (bool: one
// byte 0 or 1; float16: IEEE binary16 bits).
func (a *Array) FillValue() []byte { return slices.Clone(a.info.fill) }

// DimensionNames returns the zarr v3 dimension_names, "" for unnamed
// dimensions, or nil when the metadata has none (always for zarr v2).
func (a *Array) DimensionNames() []string { return slices.Clone(a.info.dimNames) }

// Attributes returns the user attributes (zarr v3 "attributes", zarr v2
// .zattrs) as JSON, or nil when there are none.
func (a *Array) Attributes() json.RawMessage { return slices.Clone(a.info.attrs) }

// ShardShape returns the shape of the chunk grid's cells: the shard shape
// of a sharded array, or the chunk shape of an unsharded one. Store keys
// name these cells.
func (a *Array) ShardShape() []int64 { return slices.Clone(a.info.gridChunk) }

// ChunkShape returns the shape of the chunks a read decodes: the innermost
// inner chunk shape of a sharded array (through nested sharding), or the
// chunk shape of an unsharded one. Every chunk a Plan lists has this shape,
// except for sharding codecs wrapped in other codecs, which decode whole.
func (a *Array) ChunkShape() []int64 { return slices.Clone(a.leaf) }

// GridShape returns the number of chunk grid cells (shards, or chunks when
// unsharded) along each axis.
func (a *Array) GridShape() []int64 {
	g := make([]int64, len(a.info.shape))
	for i, n := range a.info.shape {
		c := a.info.gridChunk[i]
		g[i] = (n + c - 1) / c
	}
	return g
}

// Codec returns the codec chain of the chunk grid's cells.
func (a *Array) Codec() *ChunkCodec { return a.info.codec }

// ChunkKey returns the store key of the grid cell at coordinate g.
func (a *Array) ChunkKey(g []int64) string { return joinKey(a.path, a.info.keys.key(g)) }
