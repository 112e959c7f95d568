package serve

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestServeRequestID sends requests whose id is not a non-negative
// integer: each gets an INVAL answer for "request" carrying the id as
// sent, and the session goes on. A message that is not a JSON object is
// logged and skipped.
func TestServeRequestID(t *testing.T) {
	c, done := startServe(t)
	ids := []string{`"7"`, `1.5`, `-1`, `1e3`, `true`, `[1]`, `{"a":1}`, `9223372036854775808`, `""`}
	for _, id := range ids {
		c.sendRaw([]byte(`{"id": ` + id + `, "op": "pending"}`))
	}
	c.sendRaw([]byte(`[1, 2]`))
	c.sendRaw([]byte(`"hello"`))
	c.sendRaw([]byte(`{"id": 3, "op": 5}`)) // an integer id, a malformed request
	e := wantError(t, "malformed request", c.wait(3), statusInval)
	if e.What != "request" || !strings.Contains(e.Message, "malformed") {
		t.Errorf("malformed request: %+v", e)
	}
	if len(c.odd) != len(ids) {
		t.Fatalf("%d answers to %d requests with odd ids: %+v", len(c.odd), len(ids), c.odd)
	}
	for i, m := range c.odd {
		if string(m.RawID) != strings.ReplaceAll(ids[i], " ", "") || m.OK || m.Error == nil || m.Error.Status != statusInval || m.Error.What != "request" || !strings.Contains(m.Error.Message, "non-negative integer") {
			t.Errorf("request with id %s: answer %s %+v", ids[i], m.RawID, m.Error)
		}
	}
	mustOK(t, "hello", c.call("hello", hello(hostConfig())))
	mustOK(t, "close", c.call("close", nil))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestServePopAgain: a pop that no batch can complete is answered AGAIN at
// once, counting the batches the pops queued before it will take: 65 pops
// with nothing pushed all get an answer, and so do pops of samples that do
// not fill a batch until a flush.
func TestServePopAgain(t *testing.T) {
	path, arr := testArray(t, t.TempDir())
	c, done := startServe(t)
	mustOK(t, "hello", c.call("hello", hello(hostConfig()))) // batch_size 3
	var pops []int64
	for range 65 {
		pops = append(pops, c.start("pop", nil))
	}
	for _, id := range pops {
		e := wantError(t, "pop with nothing pushed", c.wait(id), statusAgain)
		if e.Message != "pop: no batch can complete: 0 sample(s) in flight, batch_size 3, no flush; push more or flush" {
			t.Fatalf("pop with nothing pushed: %q", e.Message)
		}
	}
	boxes := randomBoxes(rand.New(rand.NewPCG(11, 12)), 7, arr.Shape(), []int64{4, 5, 6})
	mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(path, boxes[:2])}))
	e := wantError(t, "pop of 2 samples", c.call("pop", nil), statusAgain)
	if !strings.Contains(e.Message, "2 sample(s) in flight, batch_size 3") {
		t.Errorf("pop of 2 samples: %q", e.Message)
	}
	// 6 samples: two batches; three pops sent at once, the third AGAIN.
	mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(path, boxes[2:6])}))
	p1, p2, p3 := c.start("pop", nil), c.start("pop", nil), c.start("pop", nil)
	for _, id := range []int64{p1, p2} {
		m := mustOK(t, "pop", c.wait(id))
		closeFDs(m)
		c.send(map[string]any{"op": "release", "batch": m.Batch.ID})
	}
	wantError(t, "a third pop of two batches", c.wait(p3), statusAgain)
	// The seventh sample, flushed: a ragged batch.
	mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(path, boxes[6:])}))
	mustOK(t, "flush", c.call("flush", nil))
	m := mustOK(t, "pop after flush", c.call("pop", nil))
	closeFDs(m)
	if m.Batch.N != 1 {
		t.Errorf("the flushed batch has %d samples, want 1", m.Batch.N)
	}
	wantError(t, "pop after everything", c.call("pop", nil), statusAgain)
	mustOK(t, "close", c.call("close", nil))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestServeSlotsHeld: a pop while the client holds every batch slot is
// answered AGAIN, naming the held batches, their slots and batch_slots;
// after a release the pop works.
func TestServeSlotsHeld(t *testing.T) {
	path, arr := testArray(t, t.TempDir())
	c, done := startServe(t)
	mustOK(t, "hello", c.call("hello", hello(hostConfig()))) // batch_size 3, batch_slots 2
	boxes := randomBoxes(rand.New(rand.NewPCG(13, 14)), 9, arr.Shape(), []int64{4, 5, 6})
	mustOK(t, "push", c.call("push", map[string]any{"samples": samplesOf(path, boxes)}))
	a, b := mustOK(t, "pop", c.call("pop", nil)), mustOK(t, "pop", c.call("pop", nil))
	closeFDs(a)
	closeFDs(b)
	e := wantError(t, "pop with both slots held", c.call("pop", nil), statusAgain)
	want := "pop: all 2 batch slots are held by the client (batches 0, 1 in slots " +
		strings.Join([]string{strconv.Itoa(a.Batch.Slot), strconv.Itoa(b.Batch.Slot)}, ", ") +
		"): release one (Batch.release, or drop its tensors) before popping; Config.batch_slots = 2"
	if e.Message != want {
		t.Errorf("pop with both slots held: %q\nwant %q", e.Message, want)
	}
	c.send(map[string]any{"op": "release", "batch": a.Batch.ID})
	m := mustOK(t, "pop after a release", c.call("pop", nil))
	closeFDs(m)
	if m.Batch.ID != 2 || m.Batch.Slot != a.Batch.Slot {
		t.Errorf("pop after releasing batch 0: batch %d in slot %d, want 2 in slot %d", m.Batch.ID, m.Batch.Slot, a.Batch.Slot)
	}
	mustOK(t, "close", c.call("close", nil))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// closeFDs closes the descriptors that came with m.
func closeFDs(m *protoMsg) {
	for _, fd := range m.fds {
		syscall.Close(fd)
	}
}
