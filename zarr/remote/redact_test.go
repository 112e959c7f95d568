package remote_test

import (
	"testing"

	"github.com/damacy-go/damacy/zarr/remote"
)

var redactTests = []struct {
	in, out string
}{
	{"s3://bucket/x.zarr", "s3://bucket/x.zarr"},
	{"/data/x.zarr", "/data/x.zarr"},
	{"no url here: a=b&c=d", "no url here: a=b&c=d"},
	{"https://host/x.zarr?X-Amz-Signature=abc123&token=t0k", "https://host/x.zarr?X-Amz-Signature=***&token=***"},
	{"https://user:pw@host:8443/x.zarr", "https://user:***@host:8443/x.zarr"},
	{"https://user@host/x", "https://user@host/x"},
	{"https://u:p@ss@host/x", "https://u:***@host/x"},
	{"http://host/x?flag&a=&b=1", "http://host/x?flag&a=&b=***"},
	{`remote: GET "https://h/x.zarr/zarr.json?sig=s3cr3t": connection refused`, `remote: GET "https://h/x.zarr/zarr.json?sig=***": connection refused`},
	{"pipeline: open https://h/x.zarr?sig=s3cr3t: not found", "pipeline: open https://h/x.zarr?sig=***: not found"},
	{"push https://h/x?sig=abc[0:64,0:64]: bad box", "push https://h/x?sig=***[0:64,0:64]: bad box"},
	{"(see https://h/x?sig=abc), then", "(see https://h/x?sig=***), then"},
	{"https://h/x?sig=abc, https://h/y?sig=def.", "https://h/x?sig=***, https://h/y?sig=***."},
	{"https://h/x#access_token=abc&state=1", "https://h/x#access_token=***&state=***"},
	{"https://h/x?next=https://o/y?token=abc&sig=d e", "https://h/x?next=***&sig=*** e"},
	{"a=https://h/x?sig=abc\nb=ok", "a=https://h/x?sig=***\nb=ok"},
	{"http://[::1]:9000/b/k?sig=abc", "http://[::1]:9000/b/k?sig=***"},
	{"https://h/x?sig=a%2Fb%3D", "https://h/x?sig=***"},
}

func TestRedact(t *testing.T) {
	for _, tt := range redactTests {
		got := remote.Redact(tt.in)
		if got != tt.out {
			t.Errorf("Redact(%q) = %q; want %q", tt.in, got, tt.out)
		}
		if again := remote.Redact(got); again != got {
			t.Errorf("Redact(Redact(%q)) = %q; want %q (idempotent)", tt.in, again, got)
		}
	}
}

func FuzzRedact(f *testing.F) {
	for _, tt := range redactTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := remote.Redact(s)
		if remote.Redact(r) != r {
			t.Errorf("Redact is not idempotent on %q: %q, then %q", s, r, remote.Redact(r))
		}
	})
}
