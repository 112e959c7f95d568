package remote_test

import (
	"context"
	"testing"
	"time"

	"github.com/damacy-go/damacy/zarr/remote"
	"github.com/damacy-go/damacy/zarr/remote/remotetest"
)

// TestConnectTimeout: a server whose TCP connects never complete (a full
// backlog; Linux drops the SYNs) is named with the connect timeout, which
// ends each attempt long before the response timeout.
func TestConnectTimeout(t *testing.T) {
	leakCheck(t)
	addr := remotetest.Blackhole(t)
	opts := remote.Options{Attempts: 2, Backoff: time.Millisecond, Timeout: 10 * time.Second, ConnectTimeout: 100 * time.Millisecond}
	f := failure{name: "connect", uri: "http://" + addr + "/x.zarr" + presigned, opts: opts, is: context.DeadlineExceeded, attempts: 2,
		want: "remote: GET http://" + addr + "/x.zarr/zarr.json: no connection to " + addr + " within the connect timeout of 100ms (after 2 attempts)"}
	t0 := time.Now()
	f.check(t, addr)
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("took %v: the connect timeout did not end the attempts", d)
	}
}
