package serve

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr"
	"github.com/damacy-go/damacy/zarr/writer"
)

// protoClient is a protocol client for the tests: it sends requests and
// reads frames with the descriptors that come with them.
type protoClient struct {
	t      testing.TB
	conn   *net.UnixConn
	buf    []byte
	fds    []int // received, not yet claimed by a frame
	nextID int64
	early  map[int64]*protoMsg // responses read while waiting for another
	logs   []*protoMsg
	odd    []*protoMsg // responses whose id is not an integer
}

// protoMsg is any server frame.
type protoMsg struct {
	RawID    json.RawMessage `json:"id"`
	ID       *int64          `json:"-"` // RawID when it is an integer
	OK       bool            `json:"ok"`
	Error    *errorMsg       `json:"error"`
	Op       string          `json:"op"`
	Status   string          `json:"status"` // closing
	Reason   string          `json:"reason"` // closing
	Level    int             `json:"level"`
	Msg      string          `json:"msg"`
	Attrs    map[string]any  `json:"attrs"`
	Version  int             `json:"version"`
	Server   string          `json:"server"`
	Engine   string          `json:"engine"`
	Decoder  string          `json:"decoder"`
	Device   map[string]any  `json:"device"`
	Slots    int             `json:"slots"`
	PID      int             `json:"pid"`
	Accepted int             `json:"accepted"`
	Pending  bool            `json:"pending"`
	Stats    *statsMsg       `json:"stats"`
	Batch    *batchMsg       `json:"batch"`
	FDs      int             `json:"fds"`

	fds []int  // descriptors that came with the frame
	raw []byte // the frame's JSON
}

// socketpair returns two connected Unix stream sockets.
func socketpair(t testing.TB) (*net.UnixConn, *os.File) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "client")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "server")
}

// startServe runs serve in-process on one end of a socketpair and returns
// a client on the other end and the channel serve's error arrives on.
func startServe(t *testing.T) (*protoClient, <-chan error) {
	t.Helper()
	return startServeWith(t, Options{})
}

// startServeWith is startServe with serve's options.
func startServeWith(t *testing.T, o Options) (*protoClient, <-chan error) {
	t.Helper()
	client, server := socketpair(t)
	sc, err := net.FileConn(server)
	server.Close()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), sc.(*net.UnixConn), o) }()
	c := &protoClient{t: t, conn: client, early: map[int64]*protoMsg{}}
	t.Cleanup(func() { c.conn.Close() })
	return c, done
}

// send writes one message.
func (c *protoClient) send(m map[string]any) {
	c.t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(b)
}

// sendRaw writes one frame of payload b.
func (c *protoClient) sendRaw(b []byte) {
	c.t.Helper()
	if _, err := c.conn.Write(append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...)); err != nil {
		c.t.Fatal(err)
	}
}

// fill reads what the socket has, keeping the descriptors.
func (c *protoClient) fill() error {
	b := make([]byte, 64<<10)
	oob := make([]byte, syscall.CmsgSpace(16*4))
	c.conn.SetReadDeadline(time.Now().Add(time.Minute))
	n, oobn, _, _, err := c.conn.ReadMsgUnix(b, oob)
	if oobn > 0 {
		msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn])
		if perr != nil {
			return perr
		}
		for _, m := range msgs {
			fds, perr := syscall.ParseUnixRights(&m)
			if perr != nil {
				return perr
			}
			c.fds = append(c.fds, fds...)
		}
	}
	if n > 0 {
		c.buf = append(c.buf, b[:n]...)
	}
	if n == 0 && oobn == 0 && err == nil {
		return io.EOF // recvmsg's 0: the server closed its end
	}
	return err
}

// read returns the next frame but responses to ids that are not
// integers, which it keeps in odd.
func (c *protoClient) read() (*protoMsg, error) {
	for {
		m, err := c.readAny()
		if err != nil || m.ID != nil || len(m.RawID) == 0 {
			return m, err
		}
		c.odd = append(c.odd, m)
	}
}

// readAny returns the next frame.
func (c *protoClient) readAny() (*protoMsg, error) {
	for len(c.buf) < 4 {
		if err := c.fill(); err != nil {
			return nil, err
		}
	}
	n := int(binary.LittleEndian.Uint32(c.buf))
	if n == 0 || n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	for len(c.buf) < 4+n {
		if err := c.fill(); err != nil {
			return nil, err
		}
	}
	var m protoMsg
	if err := json.Unmarshal(c.buf[4:4+n], &m); err != nil {
		return nil, err
	}
	m.raw = c.buf[4 : 4+n : 4+n]
	c.buf = c.buf[4+n:]
	if id, err := strconv.ParseInt(string(m.RawID), 10, 64); err == nil && id >= 0 {
		m.ID = &id
	}
	if m.FDs > 0 {
		if len(c.fds) < m.FDs {
			return nil, fmt.Errorf("frame says %d fds, %d arrived", m.FDs, len(c.fds))
		}
		m.fds, c.fds = c.fds[:m.FDs:m.FDs], c.fds[m.FDs:]
	}
	return &m, nil
}

// wait returns the response to request id, keeping log frames and other
// responses read meanwhile.
func (c *protoClient) wait(id int64) *protoMsg {
	c.t.Helper()
	for {
		if m, ok := c.early[id]; ok {
			delete(c.early, id)
			return m
		}
		m, err := c.read()
		if err != nil {
			c.t.Fatalf("waiting for response %d: %v", id, err)
		}
		switch {
		case m.ID == nil && m.Op == "log":
			c.logs = append(c.logs, m)
		case m.ID == nil:
			c.t.Fatalf("a frame with no id that is not a log: %+v", m)
		default:
			c.early[*m.ID] = m
		}
	}
}

// closing reads frames up to the closing message, which must be the last:
// the stream ends after it. Responses and logs read meanwhile are kept.
func (c *protoClient) closing() *protoMsg {
	c.t.Helper()
	for {
		m, err := c.read()
		if err != nil {
			c.t.Fatalf("waiting for the closing message: %v", err)
		}
		switch {
		case m.ID != nil:
			c.early[*m.ID] = m
		case m.Op == "log":
			c.logs = append(c.logs, m)
		case m.Op == "closing":
			if m2, err := c.read(); err == nil {
				c.t.Fatalf("a frame after closing: %+v", m2)
			} else if !errors.Is(err, io.EOF) {
				c.t.Fatalf("after closing: %v, want the end of the stream", err)
			}
			return m
		default:
			c.t.Fatalf("an unknown frame: %+v", m)
		}
	}
}

// waitLog reads frames until a log frame has arrived (log frames travel
// independently of responses).
func (c *protoClient) waitLog() {
	c.t.Helper()
	for len(c.logs) == 0 {
		m, err := c.read()
		if err != nil {
			c.t.Fatalf("waiting for a log frame: %v", err)
		}
		if m.ID == nil {
			c.logs = append(c.logs, m)
		} else {
			c.early[*m.ID] = m
		}
	}
}

// start sends a request and returns its id.
func (c *protoClient) start(op string, fields map[string]any) int64 {
	c.t.Helper()
	id := c.nextID
	c.nextID++
	m := map[string]any{"id": id, "op": op}
	for k, v := range fields {
		m[k] = v
	}
	c.send(m)
	return id
}

// call sends a request and waits for its response.
func (c *protoClient) call(op string, fields map[string]any) *protoMsg {
	c.t.Helper()
	return c.wait(c.start(op, fields))
}

// mustOK fails the test unless the response is ok.
func mustOK(t testing.TB, op string, m *protoMsg) *protoMsg {
	t.Helper()
	if !m.OK {
		t.Fatalf("%s: %+v", op, m.Error)
	}
	return m
}

// wantError fails the test unless the response is an error of status.
func wantError(t testing.TB, op string, m *protoMsg, status string) *errorMsg {
	t.Helper()
	if m.OK || m.Error == nil || m.Error.Status != status {
		t.Fatalf("%s: %+v (error %+v), want status %s", op, m, m.Error, status)
	}
	return m.Error
}

// stallStore serves dir over HTTP: metadata at once, every other object
// (the shards) only once unblock has been called or the request is
// cancelled, so that a pop of its samples blocks. It returns the server's
// URL.
func stallStore(t testing.TB, dir string) (url string, unblock func()) {
	t.Helper()
	release := make(chan struct{})
	unblock = sync.OnceFunc(func() { close(release) })
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "zarr.json") {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(unblock) // before srv.Close, which waits for the handlers
	return srv.URL, unblock
}

// testArray writes a sharded zstd uint16 array of noisy data.
func testArray(t testing.TB, dir string) (string, *zarr.Array) {
	t.Helper()
	path := filepath.Join(dir, "u16.zarr")
	spec := writer.Spec{Shape: []int64{30, 41, 27}, ChunkShape: []int64{8, 8, 8}, ShardShape: []int64{16, 16, 16},
		DataType: zarr.Uint16, Compression: writer.Compression{Codec: writer.Zstd, Level: 1}}
	w, err := writer.Create(path, spec)
	if err != nil {
		t.Fatal(err)
	}
	syn := &writer.Synth{Seed: 7, DataType: zarr.Uint16, Shape: spec.Shape, Amplitude: 0.5, NoiseBits: 8, RandomFraction: 0.2}
	if err := w.WriteFrom(context.Background(), 2, func(dst []byte, box []zarr.Range) error { return syn.Fill(dst, box) }); err != nil {
		t.Fatal(err)
	}
	a, err := zarr.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, a
}

// wantF32 reads box with the reference reader and converts the uint16
// values to float32 bytes, as a pipeline with f32 output must give them.
func wantF32(t testing.TB, a *zarr.Array, box [][2]int64) []byte {
	t.Helper()
	zb := make([]zarr.Range, len(box))
	for i, r := range box {
		zb[i] = zarr.Range{Start: r[0], Stop: r[1]}
	}
	reg, err := a.ReadRegion(zb)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 0, len(reg.Data)*2)
	for i := 0; i < len(reg.Data); i += 2 {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(float32(binary.LittleEndian.Uint16(reg.Data[i:]))))
	}
	return out
}

// waitGoroutines waits until no more goroutines run than before.
func waitGoroutines(t testing.TB, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines leaked: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFDs fails the test unless this process's open descriptors are back
// to before within 5 s (a connection of the test's HTTP store may close a
// moment after serve returns).
func waitFDs(t testing.TB, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for n := openFDs(t); n > before; n = openFDs(t) {
		if time.Now().After(deadline) {
			t.Errorf("%d descriptors open after serve returned, %d before", n, before)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open descriptors: %v", err)
	}
	return len(ents)
}
