package pipeline

import (
	"errors"

	"github.com/damacy-go/damacy/cuda"
)

// close frees everything once run has returned. Slots still held by the
// consumer are freed when they come back.
func (e *cudaEngine) close() error {
	var first error
	if e.stuck.Load() {
		// Synchronizing or freeing would block behind the stuck wave:
		// leave the GPU state to the process's exit.
		e.stages.close()
		return nil
	}
	if e.ex != nil {
		err := e.ex.Do(func() error {
			var errs []error
			for _, s := range []cuda.Stream{e.copyS, e.decodeS, e.asmS} {
				if s != 0 {
					errs = append(errs, s.Synchronize())
				}
			}
			if e.zstd != nil {
				errs = append(errs, e.zstd.Close())
			}
			if e.lz4 != nil {
				errs = append(errs, e.lz4.Close())
			}
			if e.empty != 0 {
				errs = append(errs, e.empty.Free())
			}
			if e.mem != 0 {
				errs = append(errs, e.mem.Free())
			}
			for _, b := range e.bufs {
				errs = append(errs, b.summary.Free())
				if b.sumHost != nil {
					errs = append(errs, b.sumHost.Free())
				}
				for _, ev := range []*cuda.Event{&b.start, &b.h2d, &b.decStart, &b.dec, &b.asmStart, &b.done, &b.late} {
					errs = append(errs, ev.Destroy())
				}
			}
			// Every slab, also those of waves still in flight when run
			// returned: the streams are idle now.
			for _, h := range e.allSlabs {
				errs = append(errs, h.Free())
			}
			for _, s := range []*cuda.Stream{&e.copyS, &e.decodeS} {
				errs = append(errs, s.Destroy())
			}
			return errors.Join(errs...)
		})
		first = err
		if e.maps != nil {
			e.maps.close() // the streams are idle and run has returned: no wave reads them
		}
	}
	e.stages.close()
	if e.pool == nil {
		e.closeExecutor()
	} else {
		// Slots held by the consumer are freed when released; the
		// executor, the assemble stream and the kernels live until then.
		e.pool.close(func(s *slot) {
			e.ex.Do(func() error {
				p := cuda.DevicePtr(s.dev)
				return errors.Join(p.Free(), s.readyEvent.Destroy(), s.share.event.Destroy())
			})
		}, e.closeExecutor)
	}
	if first != nil {
		return cudaError("close", first)
	}
	return nil
}

// closeExecutor frees what the last slot needed and stops the executor.
func (e *cudaEngine) closeExecutor() {
	if e.ex == nil {
		return
	}
	e.ex.Do(func() error {
		err := e.asmS.Synchronize()
		if e.kernels != nil {
			err = errors.Join(err, e.kernels.Unload())
		}
		return errors.Join(err, e.asmS.Destroy(), e.shareS.Destroy())
	})
	e.ex.Close()
}
