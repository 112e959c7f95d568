package sampler

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr"
)

// node is an opened URI: a plain zarr array or an OME-NGFF image.
type node struct {
	uri string
	arr *zarr.Array      // a plain array
	ms  *zarr.Multiscale // an image
}

// frame is an OME-NGFF level's voxel-to-physical transformation: voxel
// i's centre along axis k is at i*scale[k] + trans[k].
type frame struct {
	scale, trans []float64
}

// openDir is Config.Open's default: uri is a local directory.
func openDir(_ context.Context, uri string) (zarr.Store, string, error) {
	s, err := zarr.NewDirStore(uri)
	if err != nil {
		return nil, "", err
	}
	return s, "", nil
}

// openNode opens uri.
func openNode(ctx context.Context, open func(context.Context, string) (zarr.Store, string, error), uri string) (*node, error) {
	st, path, err := open(ctx, uri)
	if err != nil {
		return nil, openError(uri, err)
	}
	kind, err := zarr.InspectStore(st, path)
	if err != nil {
		return nil, openError(uri, err)
	}
	n := &node{uri: uri}
	if kind == zarr.NodeArray {
		n.arr, err = zarr.OpenStore(st, path)
	} else {
		n.ms, err = zarr.OpenNGFFStore(st, path)
	}
	if err != nil {
		return nil, openError(uri, err)
	}
	return n, nil
}

// levels returns the number of levels: 1 for a plain array.
func (n *node) levels() int {
	if n.ms == nil {
		return 1
	}
	return len(n.ms.Levels())
}

// level opens level k; field names the Config field that asked for it.
func (n *node) level(k int, field string) (*zarr.Array, *frame, error) {
	if k >= n.levels() {
		what := fmt.Sprintf("an image with %d levels", n.levels())
		if n.ms == nil {
			what = "a plain array (levels are for OME-NGFF images)"
		}
		return nil, nil, invalid(n.uri, field, "level %d of %s", k, what)
	}
	if n.ms == nil {
		return n.arr, nil, nil
	}
	a, err := n.ms.Level(k)
	if err != nil {
		return nil, nil, openError(n.uri, err)
	}
	l := n.ms.Levels()[k]
	return a, &frame{scale: l.Scale, trans: l.Translation}, nil
}

// names returns the axis names, or nil when some axis has none.
func (n *node) names() []string {
	var names []string
	if n.ms != nil {
		for _, ax := range n.ms.Axes() {
			names = append(names, ax.Name)
		}
		return names
	}
	names = n.arr.DimensionNames()
	for i, s := range names {
		if s == "" || slices.Contains(names[:i], s) {
			return nil
		}
	}
	return names
}

// openArray opens level of uri as an array to draw from; field names the
// Config.Arrays entry.
func openArray(ctx context.Context, open func(context.Context, string) (zarr.Store, string, error), uri string, level int, field string) (*array, error) {
	n, err := openNode(ctx, open, uri)
	if err != nil {
		return nil, err
	}
	arr, fr, err := n.level(level, field+".Level")
	if err != nil {
		return nil, err
	}
	return &array{uri: uri, level: level, shape: arr.Shape(), names: n.names(), frame: fr, src: n}, nil
}

// openError maps an error opening uri onto the pipeline's kinds: not
// found, bad metadata (invalid), or a store that failed (storage).
func openError(uri string, err error) error {
	kind := pipeline.ErrStorage
	switch {
	case errors.Is(err, zarr.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		kind = pipeline.ErrNotFound
	case errors.Is(err, zarr.ErrFormat), errors.Is(err, zarr.ErrUnsupported), errors.Is(err, zarr.ErrInvalidKey):
		kind = pipeline.ErrInvalid
	}
	return &pipeline.Error{Op: "sampler", Kind: kind, URI: uri, Err: err}
}
