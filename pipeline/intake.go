package pipeline

// feed moves queued samples, then PushSeq sequences, into the lookahead,
// blocking on the lookahead's capacity (the intake's backpressure). It
// alone pulls and stops the sequences. Close does not wait for it: a
// sequence blocked in its own code must not block Close; the feeder stops
// the sequences and exits once that code returns.
func (p *Pipeline) feed() {
	defer p.stopSeqs()
	for {
		it, ok := p.nextItem()
		if !ok {
			select {
			case <-p.wake:
				continue
			case <-p.ctx.Done():
				return
			}
		}
		select {
		case p.lookahead <- it:
		case <-p.ctx.Done():
			return
		}
	}
}

// pulled is a PushSeq sequence being pulled.
type pulled struct {
	next func() (Sample, bool)
	stop func()
}

// nextItem takes the next intake entry: the head of the queue, or, when the
// head is a PushSeq marker, the next sample of that sequence. The
// sequence runs outside the lock, so Push, Pending and Close never wait for
// the caller's code; Push calls made meanwhile queue behind the marker.
func (p *Pipeline) nextItem() (item, bool) {
	p.mu.Lock()
	for len(p.queue) > 0 && !p.closed {
		head := p.queue[0]
		if head.flush || head.s.URI != "" {
			p.queue = p.queue[1:]
			p.mu.Unlock()
			return head, true
		}
		seq := p.seqs[0]
		p.mu.Unlock()
		s, ok := seq.next()
		p.mu.Lock()
		if p.closed {
			break
		}
		if ok {
			if err := p.checkLocked(s); err != nil {
				err.Op = "push (sequence)"
				if p.cfg.OnError == OnErrorSkip { // left out of its batch; the sequence goes on
					p.inFlight.Add(1)
					p.mu.Unlock()
					return item{err: err}, true
				}
				p.dropSeqLocked()
				p.inFlight.Add(1)
				p.mu.Unlock()
				seq.stop()
				return item{err: err}, true
			}
			p.inFlight.Add(1)
			p.mu.Unlock()
			return item{s: cloneSample(s)}, true
		}
		p.dropSeqLocked()
		p.mu.Unlock()
		seq.stop()
		p.mu.Lock()
	}
	p.mu.Unlock()
	return item{}, false
}

// dropSeqLocked removes the head sequence and its queue marker.
func (p *Pipeline) dropSeqLocked() {
	p.seqs, p.queue = p.seqs[1:], p.queue[1:]
}

// stopSeqs stops every sequence left, as the feeder exits.
func (p *Pipeline) stopSeqs() {
	p.mu.Lock()
	seqs := p.seqs
	p.seqs = nil
	p.mu.Unlock()
	for _, s := range seqs {
		s.stop()
	}
}

// batch cuts the lookahead into batch requests, one per source.
func (p *Pipeline) batch() {
	defer p.wg.Done()
	defer func() {
		for _, l := range p.lanes {
			close(l.reqs)
		}
	}()
	var id int64
	var seq uint64 // samples taken in, for Sample.Seed's default
	var cur *batchReq
	emit := func() bool {
		for i, req := range p.split(cur) {
			select {
			case p.lanes[i].reqs <- req:
			case <-p.ctx.Done():
				return false
			}
		}
		id++
		cur = nil
		return true
	}
	for {
		var it item
		select {
		case it = <-p.lookahead:
		case <-p.ctx.Done():
			return
		}
		if it.flush {
			if cur != nil {
				cur.flushAt = it.at
				if !emit() {
					return
				}
			}
			continue
		}
		if cur == nil {
			cur = &batchReq{id: id, samples: make([]Sample, 0, p.cfg.BatchSize), pos: make([]int64, 0, p.cfg.BatchSize)}
		}
		seq++
		switch {
		case it.err != nil && p.cfg.OnError == OnErrorSkip:
			e := *it.err
			e.Position = int64(seq)
			cur.skipped = append(cur.skipped, &e)
		default:
			if it.err != nil && cur.err == nil {
				cur.err = it.err
			}
			if it.s.Seed == 0 {
				it.s.Seed = seq
			}
			cur.samples = append(cur.samples, it.s)
			cur.pos = append(cur.pos, int64(seq))
		}
		if cur.taken() == p.cfg.BatchSize && !emit() {
			return
		}
	}
}

func cloneSample(s Sample) Sample {
	s.Box = append([]Range(nil), s.Box...)
	return s
}
