package cuda

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestSymbolTable checks that every func field of driver is in the symbol
// table under its own name, and that purego accepts every signature.
func TestSymbolTable(t *testing.T) {
	d := new(driver)
	rv := reflect.ValueOf(d).Elem()
	fields := map[string]bool{}
	for i := range rv.NumField() {
		fields[rv.Type().Field(i).Name] = true
	}
	seen := map[string]bool{}
	for _, s := range d.symbols() {
		if seen[s.name] {
			t.Errorf("symbol %s listed twice", s.name)
		}
		seen[s.name] = true
		f := rv.FieldByName(s.name)
		if !f.IsValid() {
			t.Errorf("symbol %s has no driver field of that name", s.name)
			continue
		}
		if f.Addr().UnsafePointer() != reflect.ValueOf(s.fn).UnsafePointer() {
			t.Errorf("symbol %s binds a different field", s.name)
		}
	}
	for name := range fields {
		if !seen[name] {
			t.Errorf("driver field %s is not in the symbol table", name)
		}
	}
	// Binding to a non-nil address builds each function without calling
	// it; RegisterFunc panics on a signature it cannot pass.
	missing := d.bind(func(string) uintptr { return 1 })
	if len(missing) != 0 {
		t.Errorf("bind reported %v missing", missing)
	}
	for i := range rv.NumField() {
		if rv.Field(i).IsNil() {
			t.Errorf("%s not bound", rv.Type().Field(i).Name)
		}
	}
}

func TestOpenMissingLibrary(t *testing.T) {
	d, err := open("libcuda-does-not-exist.so.1")
	if d != nil || err == nil {
		t.Fatalf("open of a missing library = %v, %v", d, err)
	}
	var le *LoadError
	if !errors.As(err, &le) || !errors.Is(err, ErrNoDriver) {
		t.Fatalf("error %v is not a *LoadError matching ErrNoDriver", err)
	}
	msg := err.Error()
	// The dlerror text names the file and says why.
	if !strings.HasPrefix(msg, "cuda: open libcuda-does-not-exist.so.1") || !strings.Contains(msg, "cannot open shared object file") {
		t.Errorf("error %q lacks the library name or the dlerror text", msg)
	}
}

func TestOpenMissingSymbols(t *testing.T) {
	// libc is loaded in every purego process and has none of the symbols.
	d, err := open("libc.so.6")
	if d != nil || err == nil {
		t.Fatalf("open(libc.so.6) = %v, %v", d, err)
	}
	var le *LoadError
	if !errors.As(err, &le) || !errors.Is(err, ErrNoDriver) {
		t.Fatalf("error %v is not a *LoadError matching ErrNoDriver", err)
	}
	var required, optional int
	for _, s := range new(driver).symbols() {
		if s.optional {
			optional++
			if strings.Contains(err.Error(), s.name+",") || strings.HasSuffix(err.Error(), s.name) {
				t.Errorf("optional symbol %s reported missing", s.name)
			}
		} else {
			required++
		}
	}
	if len(le.Missing) != required || le.Missing[0] != "cuInit" {
		t.Errorf("Missing = %d symbols starting %q, want all %d required ones", len(le.Missing), le.Missing[0], required)
	}
	if !strings.Contains(err.Error(), "cuMemAlloc_v2, ") {
		t.Errorf("error %q does not list the symbols", err)
	}
}
