package bench

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
)

// progress counts work done towards a total. On a terminal it redraws one
// status line on stderr a few times a second; elsewhere it is silent, and
// only the caller's final summary is printed. A nil *progress counts
// nothing and draws nothing.
type progress struct {
	label string
	unit  string // "B" for bytes, else a noun for counts
	total int64
	done  atomic.Int64
	start time.Time

	w    io.Writer
	stop chan struct{}
	wg   sync.WaitGroup
}

// progressInterval is how often the status line is redrawn.
const progressInterval = 250 * time.Millisecond

// startProgress starts counting towards total. It draws only when e's
// Stderr is a terminal.
func startProgress(e Env, label, unit string, total int64) *progress {
	p := &progress{label: label, unit: unit, total: total, start: time.Now()}
	if !e.Progress {
		return p
	}
	p.w = e.Stderr
	p.stop = make(chan struct{})
	p.wg.Go(func() {
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.draw()
			case <-p.stop:
				fmt.Fprint(p.w, "\r\033[K")
				return
			}
		}
	})
	return p
}

// add counts n more units done.
func (p *progress) add(n int64) {
	if p != nil {
		p.done.Add(n)
	}
}

// finish stops the status line and clears it; the caller prints the
// summary. It returns the time since the start.
func (p *progress) finish() time.Duration {
	if p == nil {
		return 0
	}
	if p.stop != nil {
		close(p.stop)
		p.wg.Wait()
		p.stop = nil
	}
	return time.Since(p.start)
}

func (p *progress) draw() {
	done := p.done.Load()
	el := time.Since(p.start)
	line := fmt.Sprintf("\r\033[Kdamacy: %s %s", p.label, p.amount(done))
	if p.total > 0 {
		line += fmt.Sprintf(" of %s (%.0f%%)", p.amount(p.total), 100*float64(done)/float64(p.total))
	}
	if s := el.Seconds(); s > 0 && p.unit == "B" {
		line += fmt.Sprintf(", %s/s", base.FormatBytes(int64(float64(done)/s)))
	}
	if done > 0 && p.total > done {
		left := time.Duration(float64(el) * float64(p.total-done) / float64(done))
		line += fmt.Sprintf(", %s left", left.Round(time.Second))
	}
	fmt.Fprint(p.w, line)
}

func (p *progress) amount(n int64) string {
	if p.unit == "B" {
		return base.FormatBytes(n)
	}
	return fmt.Sprintf("%d %s", n, p.unit)
}
