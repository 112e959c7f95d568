package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/damacy-go/damacy/cmd/damacy/internal/serve"
)

var cmdServe = &command{
	name:  "serve",
	usage: "serve (--fd N | --socket PATH)",
	short: "serve batches to one client over a Unix socket (the Python front)",
	long: `Serve runs one pipeline for one client, the Python package damacy, which
starts it: it reads requests from a Unix stream socket, streams batches and
hands each one over without a copy. Batches on a GPU travel as CUDA IPC
handles of their slot and of its ready event; batches in host memory as a
shared-memory file descriptor (a memfd, sent once per slot). The protocol,
version 1, is in cmd/damacy/python/PROTOCOL.md.

--fd N serves the socket inherited as descriptor N (the client makes a
socketpair and passes one end). --socket PATH listens on PATH, accepts one
client and serves it, for debugging.

Serve writes nothing to stdout: its log records go to the client as log
messages (level WARN until the client sets another), and stderr gets only
what cannot be sent. It stops when the client sends close or closes its
end, when a write to the client fails, on SIGTERM or SIGINT, and when its
parent process dies (it asks the kernel for SIGTERM then). Stopping closes
the pipeline and releases every batch the client still held; it exits 0
on close or end of stream, 1 otherwise.`,
	setup: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		fd := fs.Int("fd", -1, "serve the inherited Unix stream socket with descriptor `N`")
		path := fs.String("socket", "", "listen on the Unix socket `PATH` and serve the first client")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 0 {
				return usagef("takes no arguments, got %d", len(args))
			}
			if (*fd >= 0) == (*path != "") {
				return usagef("want one of --fd and --socket")
			}
			if err := serve.SetParentDeathSignal(); err != nil {
				fmt.Fprintf(e.stderr, "damacy serve: %v\n", err)
			}
			ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
			defer stop()
			var conn *net.UnixConn
			var err error
			if *path != "" {
				conn, err = serve.AcceptOne(ctx, *path)
			} else {
				conn, err = serve.InheritedConn(*fd)
			}
			if err != nil {
				return err
			}
			return serve.Run(ctx, conn, serve.Options{})
		}
	},
}
