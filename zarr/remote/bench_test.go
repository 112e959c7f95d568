package remote_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr/remote"
	"github.com/damacy-go/damacy/zarr/remote/remotetest"
)

// BenchmarkGET reads a 256 MiB object from MinIO over loopback with ranged
// GETs, 64 in flight, as the pipeline reads shards: each GET spans 2 MiB
// and delivers chunks of 192 KiB with gaps of 64 KiB between them (the
// gaps stream past and are dropped), or (whole) delivers its whole span.
// It goes through s3:// (signed, SigV4) and through http:// (the
// same server, the bucket made public). B/s counts the bytes transferred;
// client-cpu-ms/GB and server-cpu-ms/GB are the CPU time this process and
// MinIO spent per GB transferred: on loopback the two share the cores.
func BenchmarkGET(b *testing.B) {
	m := remotetest.StartMinIO(b)
	m.CreateBucket(b, "bench")
	m.MakePublic(b, "bench")
	const size = 256 << 20
	dir := b.TempDir()
	obj := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < size; i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			obj[i+k] = byte(v >> (8 * k))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "obj"), obj, 0o666); err != nil {
		b.Fatal(err)
	}
	m.Upload(b, dir, "s3://bench/d")
	for _, tt := range []struct{ name, uri string }{
		{"s3", "s3://bench/d"},
		{"http", m.Endpoint + "/bench/d"},
	} {
		for _, c := range []struct {
			name  string
			span  int
			whole bool
		}{{"gaps-2MiB", 2 << 20, false}, {"whole-2MiB", 2 << 20, true}, {"whole-512KiB", 512 << 10, true}} {
			b.Run(tt.name+"/"+c.name, func(b *testing.B) {
				benchGET(b, m, tt.uri, obj, c.span, c.whole)
			})
		}
	}
}

func benchGET(b *testing.B, m *remotetest.MinIO, uri string, obj []byte, span int, whole bool) {
	const (
		chunk    = 192 << 10
		gap      = 64 << 10
		inFlight = 64
	)
	opts := m.Options()
	opts.Concurrency = inFlight
	o, err := remote.NewOpener(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	st, path, err := o.Open(context.Background(), uri)
	if err != nil {
		b.Fatal(err)
	}
	s := st.(*remote.Store)
	key := path + "/obj"
	dst := make([]byte, len(obj))
	var gets [][]remote.Range
	for off := 0; off < len(obj); off += span {
		var rs []remote.Range
		if whole {
			rs = append(rs, remote.Range{Off: int64(off), Buf: dst[off : off+span]})
		} else {
			for c := off; c+chunk <= off+span; c += chunk + gap {
				rs = append(rs, remote.Range{Off: int64(c), Buf: dst[c : c+chunk]})
			}
		}
		gets = append(gets, rs)
	}
	read := func() {
		var wg sync.WaitGroup
		next := make(chan []remote.Range)
		for range inFlight {
			wg.Go(func() {
				for rs := range next {
					if err := s.ReadRanges(context.Background(), key, rs); err != nil {
						b.Error(err)
					}
				}
			})
		}
		for _, rs := range gets {
			next <- rs
		}
		close(next)
		wg.Wait()
	}
	read() // connections up
	c0, s0 := cpuTime(b), serverCPU(b, m)
	b.SetBytes(int64(len(obj)))
	b.ResetTimer()
	for b.Loop() {
		read()
	}
	b.StopTimer()
	gb := float64(b.N) * float64(len(obj)) / 1e9
	b.ReportMetric(float64((cpuTime(b)-c0).Milliseconds())/gb, "client-cpu-ms/GB")
	b.ReportMetric(float64((serverCPU(b, m)-s0).Milliseconds())/gb, "server-cpu-ms/GB")
	for _, rs := range gets[:4] {
		for _, r := range rs {
			if string(r.Buf) != string(obj[r.Off:r.Off+int64(len(r.Buf))]) {
				b.Fatalf("bytes at %d differ", r.Off)
			}
		}
	}
}

// cpuTime is this process's CPU time, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func serverCPU(b *testing.B, m *remotetest.MinIO) time.Duration {
	d, err := m.CPUTime()
	if err != nil {
		b.Skip(err)
	}
	return d
}
