package base

import "testing"

func TestFormat(t *testing.T) {
	for _, tt := range []struct {
		n    int64
		want string
	}{{0, "0 B"}, {999, "999 B"}, {1000, "1.0 kB"}, {2_500_000, "2.5 MB"}, {3e9, "3.00 GB"}, {4e12, "4.00 TB"}} {
		if got := FormatBytes(tt.n); got != tt.want {
			t.Errorf("FormatBytes(%d) = %q; want %q", tt.n, got, tt.want)
		}
	}
	if got := Shape([]int64{3, 1, 2}); got != "[3, 1, 2]" {
		t.Errorf("Shape = %q", got)
	}
	if Ratio(3, 0) != 0 || Ratio(3, 2) != 1.5 {
		t.Errorf("Ratio(3, 0) = %v, Ratio(3, 2) = %v", Ratio(3, 0), Ratio(3, 2))
	}
	for in, want := range map[string]string{"": "", "auto": "", "host": "cpu", "cpu": "cpu", "cuda": "cuda", "gpu": "cuda", "cuda:2": "cuda:2"} {
		if got, err := EngineDevice(in); got != want || err != nil {
			t.Errorf("EngineDevice(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"tpu", "cuda:-1", "cuda:x"} {
		if _, err := EngineDevice(in); err == nil {
			t.Errorf("EngineDevice(%q): no error", in)
		}
	}
}
