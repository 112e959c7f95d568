package zarrtest

import (
	"fmt"
	"strings"
	"testing"
)

// prefixes are the package prefixes of the module's error messages. One
// message names at most one of them: a layer that wraps another's error
// does not repeat the inner layer's prefix ("pipeline: ...: zarr: ...").
var prefixes = []string{"pipeline", "zarr", "remote", "serve", "damacy"}

// MessageFaults returns what is wrong with the message msg of an error
// about the objects named by names (URIs, paths, store keys), or nil: a
// name said more than once (also as the start of a longer path below it),
// or not at all; a ": "-separated segment said twice ("not found: ...:
// not found"); more than one of the module's package prefixes.
func MessageFaults(msg string, names ...string) []string {
	var faults []string
	for _, name := range names {
		if name == "" {
			continue
		}
		switch n := countName(msg, name); {
		case n == 0:
			faults = append(faults, "does not name "+name)
		case n > 1:
			faults = append(faults, "names "+name+" more than once")
		}
	}
	seen := map[string]bool{}
	pkgs := 0
	for _, seg := range strings.Split(msg, ": ") {
		seg = strings.TrimSpace(seg)
		if seg == "" {
			continue
		}
		if seen[seg] {
			faults = append(faults, fmt.Sprintf("says %q twice", seg))
		}
		seen[seg] = true
		for _, p := range prefixes {
			if seg == p {
				pkgs++
			}
		}
	}
	if pkgs > 1 {
		faults = append(faults, "has more than one package prefix")
	}
	return faults
}

// CheckMessage fails t unless err is not nil and its message passes
// MessageFaults: it states each of names once and no segment twice.
// what says which call returned err.
func CheckMessage(t testing.TB, what string, err error, names ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	for _, f := range MessageFaults(err.Error(), names...) {
		t.Errorf("%s: message %q %s", what, err.Error(), f)
	}
}

// countName counts where name starts at a word boundary: not preceded by
// a letter, digit or one of "/._-", and not followed by a letter, digit or
// one of "._-" (a "/" may follow: a path below name counts as naming it).
func countName(msg, name string) int {
	n := 0
	for i := 0; ; {
		j := strings.Index(msg[i:], name)
		if j < 0 {
			return n
		}
		at, end := i+j, i+j+len(name)
		if (at == 0 || !pathByte(msg[at-1]) && msg[at-1] != '/') && (end == len(msg) || !pathByte(msg[end])) {
			n++
		}
		i = at + 1
	}
}

func pathByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}
