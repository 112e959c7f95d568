package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/damacy-go/damacy/internal/plan"
	"github.com/damacy-go/damacy/zarr/remote"
)

// TestRemoteMergeConfig: Config.RemoteGapBytes and RemoteSpanBytes
// default to plan's, are refused out of range naming the field, and
// decide how a wave's reads merge into GETs.
func TestRemoteMergeConfig(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil || c.RemoteGapBytes != plan.RemoteGapBytes || c.RemoteSpanBytes != plan.RemoteSpanBytes {
		t.Fatalf("defaults %d / %d, %v; want %d / %d", c.RemoteGapBytes, c.RemoteSpanBytes, err, plan.RemoteGapBytes, plan.RemoteSpanBytes)
	}
	for _, tt := range []struct {
		cfg   Config
		field string
	}{
		{Config{RemoteGapBytes: -1}, "RemoteGapBytes"},
		{Config{RemoteGapBytes: 1<<30 + 1}, "RemoteGapBytes"},
		{Config{RemoteSpanBytes: -5}, "RemoteSpanBytes"},
		{Config{RemoteSpanBytes: 2 << 30}, "RemoteSpanBytes"},
	} {
		_, err := tt.cfg.withDefaults()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(fmt.Sprint(err), "Config."+tt.field) {
			t.Errorf("withDefaults(%+v) = %v; want ErrInvalid naming Config.%s", tt.cfg, err, tt.field)
		}
	}

	src := &source{uri: "s3://b/a", obj: &remote.Store{}}
	slab := make([]byte, 4<<20)
	reads := []readOp{
		{src: src, key: "k", offset: 0, length: 100, slabOff: 0},
		{src: src, key: "k", offset: 1 << 20, length: 100, slabOff: 256},
		{src: src, key: "k", offset: 3 << 20, length: 100, slabOff: 512},
	}
	for _, tt := range []struct {
		m    plan.GETMerge
		want string
	}{
		{plan.GETMerge{Gap: plan.RemoteGapBytes, Span: plan.RemoteSpanBytes}, "[1 1 1]"},
		{plan.GETMerge{Gap: 2 << 20, Span: plan.RemoteSpanBytes}, "[3]"},
		{plan.GETMerge{Gap: 2 << 20, Span: 2 << 20}, "[2 1]"},
	} {
		reqs, _ := groupRemote(reads, slab, tt.m)
		var n []int
		for _, q := range reqs {
			n = append(n, len(q.ranges))
		}
		if got := fmt.Sprint(n); got != tt.want {
			t.Errorf("groupRemote by %+v: GETs of %s reads; want %s", tt.m, got, tt.want)
		}
	}
}
