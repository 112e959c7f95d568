package cudatest

import (
	"errors"
	"fmt"
	"testing"
)

// recorder is a testing.TB that records Fatalf and Logf instead of acting.
type recorder struct {
	testing.TB
	fatal, logged string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }
func (r *recorder) Logf(format string, args ...any)   { r.logged = fmt.Sprintf(format, args...) }

func TestRequireNVCOMP(t *testing.T) {
	missing := errors.New("no libnvcomp.so")
	for _, tt := range []struct {
		env        string
		err        error
		fail, logs bool
	}{
		{"1", missing, true, false},
		{"", missing, false, true},
		{"0", missing, false, true},
		{"1", nil, false, false},
	} {
		t.Setenv(RequireEnv, tt.env)
		r := &recorder{TB: t}
		RequireNVCOMP(r, tt.err)
		if (r.fatal != "") != tt.fail || (r.logged != "") != tt.logs {
			t.Errorf("%s=%q, err %v: fatal %q, logged %q; want fail %v, log %v", RequireEnv, tt.env, tt.err, r.fatal, r.logged, tt.fail, tt.logs)
		}
	}
}
