package serve

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/pipeline"
)

// Main is `damacy serve` once its flags are parsed: it serves the
// connection that connect makes (InheritedConn or AcceptOne) with Run, and
// does what the server process must do on its way out. The first SIGTERM
// or SIGINT stops Run (waiting pops fail with SHUTDOWN, the client gets a
// closing message, the pipeline is closed within 5 s); a second one exits
// the process at once. Whatever the way out, the files the CUDA driver
// made in /dev/shm for this process's interprocess events are removed
// (cuda.RemoveIPCFiles) once the pipeline is closed, or given up on.
// Messages go to opts.Stderr.
func Main(ctx context.Context, connect func(context.Context) (*net.UnixConn, error), opts Options) error {
	stderr := opts.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	defer removeIPCFiles(stderr)
	shareCPUs(os.Getenv, runtime.NumCPU())
	ctx, stop := stopOnSignal(ctx, stderr)
	defer stop()
	conn, err := connect(ctx)
	if err != nil {
		return err
	}
	return Run(ctx, conn, opts)
}

// shareCPUs gives the Go runtime this loader's share of the host's CPUs
// (at least 4) when a launcher runs several loaders on one host, as
// torchrun does with LOCAL_WORLD_SIZE set to the ranks per host (the
// Python client multiplies it by the workers of a DataLoader whose workers
// each run a loader), unless GOMAXPROCS is set: every loader then sizes
// its CPU workers (default ComputeThreads) to its share instead of to the
// whole host: loaders that each ran on every core slowed one another
// (cmd/damacy/BENCH.md, "the Python front at the engine's speed").
func shareCPUs(getenv func(string) string, cpus int) {
	if getenv("GOMAXPROCS") != "" {
		return
	}
	n := pipeline.LoadersPerHost(getenv)
	if n <= 1 {
		return
	}
	if share := max(4, cpus/n); share < runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(share)
	}
}

// removeIPCFiles removes this process's files in /dev/shm, saying on
// stderr what it could not remove.
func removeIPCFiles(stderr io.Writer) {
	if err := cuda.RemoveIPCFiles(os.Getpid()); err != nil {
		fmt.Fprintf(stderr, "damacy serve: warning: %v\n", err)
	}
}

// signalName names a signal that stops the server.
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case os.Interrupt:
		return "SIGINT"
	}
	return sig.String()
}

// stopOnSignal returns a context cancelled by the first SIGTERM or SIGINT,
// with a cause naming it; the second exits the process at once, status 1,
// after removing its files in /dev/shm. The function returned stops the
// handling.
func stopOnSignal(ctx context.Context, stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	quit := make(chan struct{})
	handled := make(chan struct{})
	go func() {
		defer close(handled)
		select {
		case sig := <-sigs:
			cancel(fmt.Errorf("received %s", signalName(sig)))
		case <-quit:
			return
		}
		select {
		case sig := <-sigs:
			fmt.Fprintf(stderr, "damacy serve: received %s again while stopping: exiting now\n", signalName(sig))
			removeIPCFiles(stderr)
			os.Exit(1)
		case <-quit:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(quit)
		<-handled
		cancel(nil)
	}
}
