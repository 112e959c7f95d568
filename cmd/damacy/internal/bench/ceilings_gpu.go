package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/pipeline"
	"github.com/damacy-go/damacy/ptx"
)

// gpuLine names the GPU of device "cuda:N" and the driver's CUDA version.
func gpuLine(device string) (gpu, driver string) {
	n, _ := strconv.Atoi(strings.TrimPrefix(device, "cuda:"))
	if dev, err := cuda.GetDevice(n); err == nil {
		gpu, _ = dev.Name()
	}
	if v, err := cuda.DriverVersion(); err == nil {
		driver = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	return gpu, driver
}

// gpuCeilings measures, on the run's GPU, pinned host-to-device copies at
// the run's average copy size and the assemble kernel over abs (one batch
// per source, of the sources names, timed one after the other).
func gpuCeilings(device string, st pipeline.Stats, sl scale, abs []*assembleBench, names []string) ([]Ceiling, error) {
	ex, err := gpuExecutor(device)
	if err != nil {
		return nil, err
	}
	defer ex.Close()
	var cs []Ceiling
	var errs []error
	if st.H2D.Count > 0 && st.H2D.InBytes > 0 {
		size := int(st.H2D.InBytes / st.H2D.Count)
		var c Ceiling
		err := ex.Do(func() error {
			var err error
			c, err = h2dCeiling(size)
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("h2d: %w", err))
		} else {
			sl.apply(&c, sl.copied)
			cs = append(cs, c)
		}
	}
	if abs != nil {
		var each []Ceiling
		err := ex.Do(func() error {
			for _, ab := range abs {
				c, err := assembleOnlyGPU(ab)
				if err != nil {
					return err
				}
				each = append(each, c)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("assemble-only (gpu): %w", err))
		} else {
			cs = append(cs, sl.combine(each, names))
		}
	}
	return cs, errors.Join(errs...)
}

// h2dCeiling times back-to-back pinned copies of size bytes on one stream
// with events. It runs on an executor's thread.
func h2dCeiling(size int) (c Ceiling, err error) {
	size = max(size, 1)
	count := max(10, h2dMinBytes/size)
	host, err := cuda.HostMap(size)
	if err != nil {
		return c, err
	}
	defer host.Free()
	devBuf, err := cuda.MemAlloc(size)
	if err != nil {
		return c, err
	}
	defer devBuf.Free()
	s, err := cuda.NewStream(cuda.StreamNonBlocking)
	if err != nil {
		return c, err
	}
	defer s.Destroy()
	el, err := timeOnStream(s, count, func() error { return s.CopyHtoD(devBuf, host.Bytes()) })
	if err != nil {
		return c, err
	}
	total := int64(size) * int64(count)
	return Ceiling{
		Name: "h2d (pinned)", Of: "copied", Detail: fmt.Sprintf("%d copies of %s", count, base.FormatBytes(int64(size))),
		Bytes: total, Time: el, GBps: float64(total) / el.Seconds() / 1e9, Limits: true,
	}, nil
}

// timeOnStream runs one untimed call of f, then count timed ones between
// two events on s, and returns the GPU time of the timed ones.
func timeOnStream(s cuda.Stream, count int, f func() error) (time.Duration, error) {
	return timeOnStreams([]cuda.Stream{s}, count, func(int) error { return f() })
}

// timeOnStreams runs one untimed call of f(i) on each stream ss[i] and
// waits for them, then count timed rounds of a call per stream, the
// streams at once, between an event on ss[0] that the others wait for and
// one on ss[0] after it waited for the others' last calls; it returns the
// GPU time of the timed rounds.
func timeOnStreams(ss []cuda.Stream, count int, f func(i int) error) (time.Duration, error) {
	for i := range ss {
		if err := f(i); err != nil {
			return 0, err
		}
	}
	for _, s := range ss {
		if err := s.Synchronize(); err != nil {
			return 0, err
		}
	}
	var evs []*cuda.Event
	defer func() {
		for _, e := range evs {
			e.Destroy()
		}
	}()
	event := func(flags cuda.EventFlags) (cuda.Event, error) {
		e, err := cuda.NewEvent(flags)
		if err == nil {
			evs = append(evs, &e)
		}
		return e, err
	}
	start, err := event(cuda.EventDefault)
	if err != nil {
		return 0, err
	}
	end, err := event(cuda.EventDefault)
	if err != nil {
		return 0, err
	}
	if err := start.Record(ss[0]); err != nil {
		return 0, err
	}
	for _, s := range ss[1:] {
		if err := s.WaitEvent(start); err != nil {
			return 0, err
		}
	}
	for range count {
		for i := range ss {
			if err := f(i); err != nil {
				return 0, err
			}
		}
	}
	for _, s := range ss[1:] {
		join, err := event(cuda.EventDisableTiming)
		if err != nil {
			return 0, err
		}
		if err := join.Record(s); err != nil {
			return 0, err
		}
		if err := ss[0].WaitEvent(join); err != nil {
			return 0, err
		}
	}
	if err := end.Record(ss[0]); err != nil {
		return 0, err
	}
	if err := end.Synchronize(); err != nil {
		return 0, err
	}
	return cuda.EventElapsedTime(start, end)
}

// assembleOnlyGPU times the assemble kernel over ab's batch, with its
// transforms. It runs on an executor's thread.
func assembleOnlyGPU(ab *assembleBench) (c Ceiling, err error) {
	k, err := ptx.Load()
	if err != nil {
		return c, err
	}
	defer k.Unload()
	l := ab.plan.Layout()
	opBytes := ptx.OpBytes(ab.plan.Ops())
	blockOps := ab.plan.BlockOps()
	blockBytes := make([]byte, 4*len(blockOps))
	for i, v := range blockOps {
		binary.NativeEndian.PutUint32(blockBytes[4*i:], v)
	}
	var bufs []*cuda.DevicePtr
	defer func() {
		for _, p := range bufs {
			p.Free()
		}
	}()
	upload := func(b []byte) (cuda.DevicePtr, error) {
		p, err := cuda.MemAlloc(max(len(b), 1))
		if err != nil {
			return 0, err
		}
		bufs = append(bufs, &p)
		if len(b) > 0 {
			err = cuda.CopyHtoD(p, b)
		}
		return p, err
	}
	arena, err := upload(ab.arena)
	if err != nil {
		return c, err
	}
	ops, err := upload(opBytes)
	if err != nil {
		return c, err
	}
	blocks, err := upload(blockBytes)
	if err != nil {
		return c, err
	}
	// The run's transforms (a table only when some sample has one), and
	// the misfit status an integer output whose source may not fit needs.
	var xfs, misfits cuda.DevicePtr
	if t := ab.plan.Transforms(); t != nil {
		if xfs, err = upload(ptx.TransformBytes(t)); err != nil {
			return c, err
		}
	}
	if ab.plan.NeedsCheck() {
		if misfits, err = upload(make([]byte, ptx.MisfitStatusSize)); err != nil {
			return c, err
		}
	}
	out, err := cuda.MemAlloc(int(l.Bytes()))
	if err != nil {
		return c, err
	}
	bufs = append(bufs, &out)
	s, err := cuda.NewStream(cuda.StreamNonBlocking)
	if err != nil {
		return c, err
	}
	defer s.Destroy()
	const count = 20
	el, err := timeOnStream(s, count, func() error {
		return k.Assemble(s, ab.plan, ptx.AssembleArgs{Ops: ops, BlockOps: blocks, Transforms: xfs, Arena: arena, ArenaBytes: int64(len(ab.arena)), Out: out, Misfits: misfits})
	})
	if err != nil {
		return c, err
	}
	total := l.Bytes() * count
	g := float64(total) / el.Seconds() / 1e9
	return Ceiling{
		Name: "assemble-only (gpu)", Of: "output", Detail: fmt.Sprintf("%d samples, %d ops, %d launches", l.Samples, len(ab.plan.Ops()), count),
		Bytes: total, Time: el, GBps: g, OutputGBps: g, PerOutput: 1, Limits: true,
	}, nil
}

// gpuExecutor starts an executor on device "cuda:N".
func gpuExecutor(device string) (*cuda.Executor, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(device, "cuda:"))
	if err != nil {
		return nil, fmt.Errorf("device %q: %w", device, err)
	}
	dev, err := cuda.GetDevice(n)
	if err != nil {
		return nil, err
	}
	return cuda.NewExecutor(dev)
}
