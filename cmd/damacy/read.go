package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/zarr"
)

var cmdRead = &command{
	name:  "read",
	usage: "read PATH --box START:STOP,... [--level K] [--dtype native|f32|bf16] [--engine auto|host|cuda] -o OUT.npy",
	short: "read one box of an array or OME-NGFF image into a .npy file",
	long: `Read reads one box of the zarr array or OME-NGFF image at PATH and writes it
to a NumPy .npy file. The box has one START:STOP range per axis, half-open,
in the array's axis order (for an image, in the voxels of --level); it may
reach outside the array, where it reads as the fill value.

--dtype native (the default) writes the array's own data type with the
byte order made little-endian, through the reference reader. --dtype f32
and bf16 run the box through the streaming pipeline, a batch of one, on
the engine --engine selects, and write float32, or bfloat16 as the raw 16
bits in a uint16 array (NumPy has no bfloat16: view the bits with
torch.from_numpy(a).view(torch.bfloat16), or as float32 with
(a.astype(np.uint32) << 16).view(np.float32)).

` + uriHelp + `

Examples:
  damacy read /data/image.ome.zarr --box 0:64,0:256,0:256 -o crop.npy
  damacy read /data/a.zarr --box -8:8,100:228 --dtype bf16 -o crop.npy
  damacy read s3://bucket/images/a.ome.zarr --box 0:64,0:256,0:256 -o crop.npy`,
	setup: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		var box boxFlag
		fs.Var(&box, "box", "the box: START:STOP per axis, comma-separated")
		level := fs.Int("level", 0, "OME-NGFF level (0 is full resolution)")
		dtype := fs.String("dtype", "native", "output type: native, f32 or bf16")
		engine := fs.String("engine", "auto", "engine for f32 and bf16: auto, host, cuda or cuda:N")
		out := fs.String("o", "", "output .npy file")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 1 {
				return usagef("want one path, got %d arguments", len(args))
			}
			if box == nil {
				return usagef("--box is required")
			}
			if *out == "" {
				return usagef("-o is required")
			}
			if *level < 0 {
				return usagef("--level %d: must not be negative", *level)
			}
			dev, err := base.EngineDevice(*engine)
			if err != nil {
				return usagef("--engine %v", err)
			}
			r := readRequest{path: args[0], box: box, level: *level, device: dev, out: *out}
			switch *dtype {
			case "native":
				set := false
				fs.Visit(func(f *flag.Flag) { set = set || f.Name == "engine" })
				if set {
					return usagef("--engine applies to --dtype f32 and bf16 only")
				}
				return readNative(ctx, e, r)
			case "f32", "float32", "bf16", "bfloat16":
				dt, _ := pipeline.ParseDtype(*dtype)
				return readPipeline(ctx, e, r, dt)
			}
			return usagef("--dtype %q: want native, f32 or bf16", *dtype)
		}
	},
}

// boxFlag is --box: START:STOP ranges, comma-separated.
type boxFlag []zarr.Range

func (b *boxFlag) String() string {
	if b == nil {
		return ""
	}
	p := make([]string, len(*b))
	for i, r := range *b {
		p[i] = fmt.Sprintf("%d:%d", r.Start, r.Stop)
	}
	return strings.Join(p, ",")
}

func (b *boxFlag) Set(s string) error {
	var out []zarr.Range
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, ok := strings.Cut(strings.TrimSpace(part), ":")
		start, err1 := strconv.ParseInt(lo, 10, 64)
		stop, err2 := strconv.ParseInt(hi, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("%q is not START:STOP", part)
		}
		if stop <= start {
			return fmt.Errorf("%q is empty (STOP must exceed START)", part)
		}
		out = append(out, zarr.Range{Start: start, Stop: stop})
	}
	*b = out
	return nil
}

type readRequest struct {
	path   string
	box    []zarr.Range
	level  int
	device string
	out    string
}

// openLevel opens path (or URI) as an array, or level k of an OME-NGFF
// image; done releases the store's connections.
func openLevel(ctx context.Context, path string, k int) (a *zarr.Array, done func(), err error) {
	st, p, done, err := openURI(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	a, err = openLevelStore(st, p, path, k)
	if err != nil {
		done()
		return nil, nil, err
	}
	return a, done, nil
}

func openLevelStore(st zarr.Store, p, path string, k int) (*zarr.Array, error) {
	kind, err := zarr.InspectStore(st, p)
	if err != nil {
		return nil, err
	}
	switch kind {
	case zarr.NodeArray:
		if k != 0 {
			return nil, fmt.Errorf("%s is an array, not an OME-NGFF image: --level %d does not apply", path, k)
		}
		return zarr.OpenStore(st, p)
	case zarr.NodeMultiscale:
		m, err := zarr.OpenNGFFStore(st, p)
		if err != nil {
			return nil, err
		}
		if k >= len(m.Levels()) {
			return nil, fmt.Errorf("%s has %d levels: --level %d does not exist", path, len(m.Levels()), k)
		}
		return m.Level(k)
	}
	return nil, fmt.Errorf("%s is a zarr group without OME-NGFF multiscales: name one of its arrays", path)
}

func checkRank(a *zarr.Array, r readRequest) error {
	if len(r.box) != a.Rank() {
		return fmt.Errorf("--box has %d ranges; %s has %d axes (shape %s)", len(r.box), r.path, a.Rank(), base.Shape(a.Shape()))
	}
	return nil
}

func readNative(ctx context.Context, e *env, r readRequest) error {
	a, done, err := openLevel(ctx, r.path, r.level)
	if err != nil {
		return err
	}
	defer done()
	if err := checkRank(a, r); err != nil {
		return err
	}
	reg, err := a.ReadRegion(r.box)
	if err != nil {
		return err
	}
	descr, err := npyDescr(reg.DataType)
	if err != nil {
		return err
	}
	if err := writeNPYFile(r.out, descr, reg.Shape, reg.Data); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "damacy: wrote %s %s %s to %s\n", reg.DataType, base.Shape(reg.Shape), boxString(r.box), r.out)
	return nil
}

// readPipeline reads the box through a pipeline with a batch of one.
func readPipeline(ctx context.Context, e *env, r readRequest, dt pipeline.Dtype) error {
	a, done, err := openLevel(ctx, r.path, r.level)
	if err != nil {
		return err
	}
	done() // the pipeline opens the path again, with its own connections
	if err := checkRank(a, r); err != nil {
		return err
	}
	shape := make([]int, len(r.box))
	outShape := make([]int64, len(r.box))
	for i, rg := range r.box {
		if rg.Len() > 1<<31 {
			return fmt.Errorf("--box axis %d: extent %d is too large", i, rg.Len())
		}
		shape[i] = int(rg.Len())
		outShape[i] = rg.Len()
	}
	p, err := pipeline.New(pipeline.Config{BatchSize: 1, SampleShape: shape, Dtype: dt, Device: r.device, Logger: newLogger(e.stderr)})
	if err != nil {
		return err
	}
	defer p.Close()
	if err := p.Push(pipeline.Sample{URI: r.path, Box: r.box, Level: r.level}); err != nil {
		return err
	}
	if err := p.Flush(); err != nil {
		return err
	}
	b, err := p.Pop(ctx)
	if err != nil {
		return err
	}
	defer b.Release()
	data, err := batchHostBytes(b)
	if err != nil {
		return err
	}
	descr := nativeOrder() + "f4"
	if dt == pipeline.BF16 {
		descr = nativeOrder() + "u2"
	}
	if err := writeNPYFile(r.out, descr, outShape, data); err != nil {
		return err
	}
	st := p.Stats()
	fmt.Fprintf(e.stderr, "damacy: wrote %s %s %s to %s (engine %s, decoder %s)\n", dt, base.Shape(outShape), boxString(r.box), r.out, st.Engine, st.Decoder)
	return nil
}

// batchHostBytes returns the batch's bytes in host memory: the batch
// itself on the host engine, a copy from the device on the CUDA engine.
func batchHostBytes(b *pipeline.Batch) ([]byte, error) {
	if data := b.Bytes(); data != nil {
		return data, nil
	}
	info := b.Info()
	n := info.Dtype.Size()
	for _, d := range info.Shape {
		n *= int(d)
	}
	data := make([]byte, n)
	if err := b.CopyToHost(data); err != nil {
		return nil, err
	}
	return data, nil
}

// nativeOrder is NumPy's byte-order character for this machine.
func nativeOrder() string {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], 1)
	if b[0] == 1 {
		return "<"
	}
	return ">"
}

func boxString(box []zarr.Range) string {
	return "[" + (*boxFlag)(&box).String() + "]"
}
