package remotetest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// tool is a server the tests run, built from its pinned Go module into
// .cache/NAME/ at the module's root (a stamp file, VERSION, names the
// version built there).
type tool struct {
	name    string // the binary's, and its cache folder's
	module  string // the Go package to install
	version string
	env     string // names a binary to use instead of the cached one
	require string // set to 1: build a missing binary rather than skip
	target  string // the make target that builds it
}

// found is where a tool's binary is: path, or skip saying why there is
// none and none is to be built, or err.
type found struct {
	path, skip string
	err        error
}

// find looks for the tool: $env, else the cached binary of the pinned
// version, else (with $require=1) one built now.
func (tl tool) find() found {
	path, skip, err := tl.lookup()
	return found{path, skip, err}
}

func (tl tool) lookup() (string, string, error) {
	if p := os.Getenv(tl.env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", "", fmt.Errorf("remotetest: %s=%s: %w", tl.env, p, err)
		}
		return p, "", nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(root, ".cache", tl.name)
	bin, stamp := filepath.Join(dir, tl.name), filepath.Join(dir, "VERSION")
	current := func() bool {
		v, err := os.ReadFile(stamp)
		_, berr := os.Stat(bin)
		return err == nil && berr == nil && strings.TrimSpace(string(v)) == tl.version
	}
	if current() {
		return bin, "", nil
	}
	if os.Getenv(tl.require) != "1" {
		return "", fmt.Sprintf("no %s %s at %s: run `make %s` (go install from the module proxy), or set %s to a binary, or %s=1 to build it here", tl.name, tl.version, bin, tl.target, tl.env, tl.require), nil
	}
	// Build it, once across the test processes that want it.
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return "", "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if current() {
		return bin, "", nil
	}
	cmd := exec.Command("go", "install", "-ldflags=-s -w", tl.module+"@"+tl.version)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("remotetest: building %s %s: %v\n%s", tl.name, tl.version, err, out)
	}
	if err := os.WriteFile(stamp, []byte(tl.version+"\n"), 0o666); err != nil {
		return "", "", err
	}
	return bin, "", nil
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("remotetest: no go.mod above the working directory")
		}
		dir = parent
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// server is a server binary the tests started, with its output.
type server struct {
	name   string
	cmd    *exec.Cmd
	out    bytes.Buffer
	exited chan error
}

// startServer starts cmd (its output kept for messages) and returns it
// running; name is what messages call it.
func startServer(name string, cmd *exec.Cmd) (*server, error) {
	s := &server{name: name, cmd: cmd, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = &s.out, &s.out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("remotetest: starting %s: %w", name, err)
	}
	go func() { s.exited <- cmd.Wait() }()
	return s, nil
}

// stop ends the server: SIGTERM, then SIGKILL after 10 s.
func (s *server) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// waitHealthy polls url with client until it answers 200 (these servers
// offer no other signal), failing when the server exits first or deadline
// passes (what names the wait in that message). On failure the server is
// stopped.
func (s *server) waitHealthy(client *http.Client, url, what string, deadline time.Time) error {
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-s.exited:
			s.exited <- err
			s.stop()
			return fmt.Errorf("remotetest: %s exited at start (%v):\n%s", s.name, err, s.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("remotetest: %s %s:\n%s", s.name, what, s.out.String())
		}
	}
}
