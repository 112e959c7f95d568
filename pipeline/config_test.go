package pipeline

import (
	"errors"
	"testing"
)

type deviceTest struct {
	in      string
	kind    deviceKind
	ordinal int
	ok      bool
}

// deviceTests are the values Config.Device documents, and some it does not.
var deviceTests = []deviceTest{
	{"", deviceAuto, 0, true},
	{"cpu", deviceHost, 0, true},
	{"host", deviceHost, 0, true},
	{"cuda", deviceCUDA, 0, true},
	{"gpu", deviceCUDA, 0, true},
	{"cuda:0", deviceCUDA, 0, true},
	{"cuda:3", deviceCUDA, 3, true},
	{"cuda:-1", 0, 0, false},
	{"cuda:", 0, 0, false},
	{"cuda:x", 0, 0, false},
	{"gpu:1", 0, 0, false},
	{"CPU", 0, 0, false},
	{"tpu", 0, 0, false},
}

func TestParseDevice(t *testing.T) {
	for i := range deviceTests {
		tt := &deviceTests[i]
		kind, ordinal, err := parseDevice(tt.in)
		if !tt.ok {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("parseDevice(%q) = %v, %d, %v; want an ErrInvalid error", tt.in, kind, ordinal, err)
			}
			continue
		}
		if err != nil || kind != tt.kind || ordinal != tt.ordinal {
			t.Errorf("parseDevice(%q) = %v, %d, %v; want %v, %d, nil", tt.in, kind, ordinal, err, tt.kind, tt.ordinal)
		}
	}
}
