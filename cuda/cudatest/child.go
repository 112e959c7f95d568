package cudatest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Child is this test binary run again, for one of its tests, as a second
// process: a process cannot open its own CUDA IPC handles, so the tests of
// IPC hand them to a child. The parent writes lines to the child's stdin
// and reads its stdout line by line.
type Child struct {
	test   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.Reader
	lines  *bufio.Scanner
	out    strings.Builder // the child's stdout read so far
	stderr bytes.Buffer
}

// StartChild starts this test binary running only the test named test
// (verbose, once), with env added to this process's environment.
func StartChild(t testing.TB, test string, env ...string) *Child {
	t.Helper()
	c := &Child{test: test, cmd: exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")}
	c.cmd.Env = append(os.Environ(), env...)
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if c.stdout, err = c.cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.lines = bufio.NewScanner(c.stdout)
	return c
}

// Send writes one line, formatted as by fmt.Sprintf, to the child's stdin.
func (c *Child) Send(format string, args ...any) {
	fmt.Fprintf(c.stdin, format+"\n", args...)
}

// Await reads the child's stdout up to the first line that starts with
// one of prefixes and returns that line, or "" when stdout ends first.
func (c *Child) Await(prefixes ...string) string {
	for c.lines.Scan() {
		line := c.lines.Text()
		c.out.WriteString(line + "\n")
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				return line
			}
		}
	}
	return ""
}

// Finish closes the child's stdin, reads the rest of its output and waits
// for it. It returns the child's stdout and stderr, and an error unless
// the child exited 0 having passed its test.
func (c *Child) Finish() (string, error) {
	c.stdin.Close()
	rest, _ := io.ReadAll(c.stdout)
	c.out.Write(rest)
	err := c.cmd.Wait()
	output := c.out.String() + c.stderr.String()
	if err == nil && !strings.Contains(c.out.String(), "--- PASS: "+c.test) {
		err = fmt.Errorf("%s did not pass", c.test)
	}
	return output, err
}
