package serve

import (
	"context"
	"fmt"
	"net"
	"os"
)

// InheritedConn wraps the inherited Unix stream socket with descriptor fd
// (the client's socketpair end).
func InheritedConn(fd int) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), "client socket")
	c, err := net.FileConn(f) // a dup: f is closed below
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("--fd %d: %w", fd, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("--fd %d is not a Unix socket", fd)
	}
	return uc, nil
}

// AcceptOne listens on the Unix socket path, returns the first connection
// and removes the socket file. It returns early, with ctx's cause, when ctx
// is done.
func AcceptOne(ctx context.Context, path string) (*net.UnixConn, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	defer l.Close() // removes the socket file
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	c, err := l.AcceptUnix()
	if err != nil && ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return c, err
}
