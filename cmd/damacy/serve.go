package main

import (
	"context"
	"flag"
	"net"

	"github.com/damacy-go/damacy/cmd/damacy/internal/serve"
)

var cmdServe = &command{
	name:  "serve",
	usage: "serve (--fd N | --socket PATH) [--parent-pid P]",
	short: "serve batches to one client over a Unix socket (the Python front)",
	long: `Serve runs one pipeline for one client, the Python package damacy, which
starts it: it reads requests from a Unix stream socket, streams batches and
hands each one over without a copy. Batches on a GPU travel as CUDA IPC
handles of their slot, of its ready event and of its done event (which the
client records after its last use of a batch); batches in host memory as a
shared-memory file descriptor (a memfd, sent once per slot). The protocol,
version 2, is in cmd/damacy/python/PROTOCOL.md.

--fd N serves the socket inherited as descriptor N (the client makes a
socketpair and passes one end). --socket PATH listens on PATH, accepts one
client and serves it, for debugging. --parent-pid P names the client's
process: serve exits at once unless P is its parent, and stops when that
process exits (whichever of its threads started serve).

Serve writes nothing to stdout: its log records go to the client as log
messages (level WARN until the client sets another), and stderr gets only
what cannot be sent. It stops when the client sends close or closes its
end, when a write to the client fails or finds the client reading nothing
for 30 s, on SIGTERM or SIGINT (a second one exits at once), and when the
parent process exits. A stop the client did not ask for answers the
waiting pops with SHUTDOWN and sends a closing message that says why, as
the last frame. Stopping releases every batch the client still held and
closes the pipeline, waiting for it at most 5 s. On every way out serve
removes the files the CUDA driver made in /dev/shm for its interprocess
events (cuda.shm.<uid>.<pid in hex>.*); a serve killed by SIGKILL leaves
them to the client. It exits 0 on close or end of stream, 1 otherwise.`,
	setup: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		fd := fs.Int("fd", -1, "serve the inherited Unix stream socket with descriptor `N`")
		path := fs.String("socket", "", "listen on the Unix socket `PATH` and serve the first client")
		parent := fs.Int("parent-pid", 0, "the client's process `P`: exit unless it is the parent, stop when it exits")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 0 {
				return usagef("takes no arguments, got %d", len(args))
			}
			if (*fd >= 0) == (*path != "") {
				return usagef("want one of --fd and --socket")
			}
			if *parent < 0 {
				return usagef("--parent-pid %d: want a process id", *parent)
			}
			connect := func(ctx context.Context) (*net.UnixConn, error) {
				if *path != "" {
					return serve.AcceptOne(ctx, *path)
				}
				return serve.InheritedConn(*fd)
			}
			return serve.Main(ctx, connect, serve.Options{ParentPID: *parent, Stderr: e.stderr, Version: currentBuild().String()})
		}
	},
}
