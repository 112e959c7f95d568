package pipeline

// sampleChecker is implemented by engines that open arrays (both real
// engines, through their stages).
type sampleChecker interface {
	checkSample(s Sample) error
}

// Check opens the array (or OME-NGFF level) that s names, and those of the
// pipeline's other sources (Config.Sources), and checks s against them, as the batch holding s would: a missing array fails with
// ErrNotFound, an element type the pipeline does not read with ErrDtype,
// a box whose rank is not the array's with ErrRank, unreadable metadata
// with ErrStorage or ErrInvalid. It reads through the pipeline's metadata
// cache, so the batch finds the array open.
//
// Push does not open arrays (it never waits on storage): such a sample
// fails its batch at Pop (or, under OnErrorSkip, is left out of it).
// Calling Check before Push reports it at once instead. Check does not
// queue anything and may block on storage.
func (p *Pipeline) Check(s Sample) error {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return newError("check", ErrShutdown, "", nil)
	}
	if s.URI == "" {
		return errorf("check", ErrInvalid, "", "sample %s: empty URI", s)
	}
	if s.Level < 0 {
		return errorf("check", ErrInvalid, s.URI, "sample %s: negative level %d", s, s.Level)
	}
	c, ok := p.eng.(sampleChecker)
	if !ok {
		return nil
	}
	if err := c.checkSample(s); err != nil {
		return err
	}
	// Every other source: its array opens, and its axes match the box's.
	for _, l := range p.lanes[1:] {
		if _, err := p.matchSource(l, s); err != nil {
			return sourceError(l.src.Name, err)
		}
	}
	return nil
}

func (s *stages) checkSample(smp Sample) error {
	src, err := s.meta.open(smp.URI, smp.Level)
	if err != nil {
		return err
	}
	if src.arr.Rank() != len(smp.Box) {
		return errorf("check", ErrRank, smp.URI, "sample %s: box rank %d, array rank %d", smp, len(smp.Box), src.arr.Rank())
	}
	return nil
}

// checkLocked validates a sample against the pipeline's sample shape,
// fixing the shape (and reserving the batch slots) on the first sample
// when Config.SampleShape was empty.
func (p *Pipeline) checkLocked(s Sample) *Error {
	if s.URI == "" {
		return errorf("push", ErrInvalid, "", "sample %s: empty URI", s)
	}
	if len(s.Box) == 0 || len(s.Box) > maxRank {
		return errorf("push", ErrRank, s.URI, "sample %s: box rank %d, want 1..%d", s, len(s.Box), maxRank)
	}
	if s.Level < 0 {
		return errorf("push", ErrInvalid, s.URI, "sample %s: negative level %d", s, s.Level)
	}
	for i, r := range s.Box {
		if r.Stop <= r.Start {
			return errorf("push", ErrInvalid, s.URI, "sample %s: axis %d is empty (%d:%d)", s, i, r.Start, r.Stop)
		}
	}
	if p.shape == nil {
		shape := make([]int, len(s.Box))
		for i, r := range s.Box {
			if r.Stop-r.Start > 1<<31 {
				return errorf("push", ErrInvalid, s.URI, "sample %s: axis %d extent %d too large", s, i, r.Stop-r.Start)
			}
			shape[i] = int(r.Stop - r.Start)
		}
		if err := p.cfg.Augment.validateShape(shape); err != nil {
			var e *Error
			if asError(err, &e) {
				e.Op = "push"
				return e
			}
		}
		if err := p.eng.reserve(shape); err != nil {
			var e *Error
			if ok := asError(err, &e); ok {
				return e
			}
			return newError("push", ErrBudget, s.URI, err)
		}
		p.shape = shape
		return nil
	}
	if len(s.Box) != len(p.shape) {
		return errorf("push", ErrRank, s.URI, "sample %s: box rank %d, want %d", s, len(s.Box), len(p.shape))
	}
	for i, r := range s.Box {
		if r.Stop-r.Start != int64(p.shape[i]) {
			return errorf("push", ErrInvalid, s.URI, "sample %s: axis %d extent %d, want %d", s, i, r.Stop-r.Start, p.shape[i])
		}
	}
	return nil
}
