// Command damacy streams crops out of sharded zarr / OME-NGFF stores onto
// NVIDIA GPUs, and inspects, generates and benchmarks such stores.
//
// Run `damacy help` for the commands and the exit codes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/damacy-go/damacy/zarr/remote"
)

// Exit codes.
const (
	exitOK    = 0 // success
	exitError = 1 // the command ran and failed
	exitUsage = 2 // bad command line
)

// command is one subcommand: its usage line, a one-line summary, a longer
// help text, and setup, which defines the command's flags on its flag set
// and returns the function that runs it on the positional arguments left
// once the flags are parsed.
type command struct {
	name  string
	usage string
	short string
	long  string
	setup func(fs *flag.FlagSet) func(ctx context.Context, e *env, args []string) error
}

// env carries the command's output streams. progress is true when stderr
// is a terminal: only then do long commands draw a status line there.
type env struct {
	stdout, stderr io.Writer
	progress       bool
}

// usageError marks a bad command line (exit 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func commands() []*command {
	return []*command{
		cmdInfo,
		cmdInspect,
		cmdRead,
		cmdGen,
		cmdBench,
		cmdDemo,
		cmdServe,
		cmdVersion,
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	// The first interrupt cancels ctx; unregistering then lets a second
	// one end the process the default way.
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without os.Exit, so that every defer runs and tests can call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr, progress: isTerminal(stderr)}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		if len(args) > 1 {
			for _, c := range commands() {
				if c.name == args[1] {
					printCommandHelp(stdout, c)
					return exitOK
				}
			}
			fmt.Fprintf(stderr, "damacy: unknown command %q\nrun 'damacy help' for usage\n", args[1])
			return exitUsage
		}
		printHelp(stdout)
		return exitOK
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...)
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := runCommand(ctx, e, c, args[1:])
		var ue *usageError
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			printCommandHelp(stdout, c)
			return exitOK
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "damacy %s: %s\nusage: damacy %s\nrun 'damacy help %s' for details\n", c.name, remote.Redact(err.Error()), c.usage, c.name)
			return exitUsage
		default:
			for _, line := range errorLines(err) {
				fmt.Fprintf(stderr, "damacy %s: error: %s\n", c.name, line)
			}
			return exitError
		}
	}
	fmt.Fprintf(stderr, "damacy: unknown command %q\nrun 'damacy help' for usage\n", args[0])
	return exitUsage
}

// runCommand parses c's flags, which may come before, between or after the
// positional arguments, and runs it.
func runCommand(ctx context.Context, e *env, c *command, args []string) error {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	runFn := c.setup(fs)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return &usageError{msg: err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return runFn(ctx, e, pos)
}

// errorLines splits an error into the lines to print: an errors.Join
// prints each of its errors on its own line. The secrets of URLs are
// masked (a presigned URI's query values, a password).
func errorLines(err error) []string {
	return strings.Split(remote.Redact(err.Error()), "\n")
}

func printHelp(w io.Writer) {
	var b strings.Builder
	b.WriteString("damacy streams crops out of sharded zarr / OME-NGFF stores onto NVIDIA GPUs.\n\nusage: damacy <command> [arguments]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.short)
	}
	b.WriteString(`
run 'damacy help <command>' for a command's flags.

Flags may come before or after a command's other arguments. Results go to
stdout (--json where offered); messages, progress and errors go to stderr.

exit codes:
  0  success
  1  the command ran and failed (unreadable store, bad scenario file,
     impossible configuration, failed batch, interrupted)
  2  bad command line (unknown command or flag, wrong number of arguments,
     malformed flag value)
`)
	io.WriteString(w, b.String())
}

func printCommandHelp(w io.Writer, c *command) {
	fmt.Fprintf(w, "usage: damacy %s\n\n%s\n", c.usage, c.long)
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	c.setup(fs)
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		io.WriteString(w, "\nflags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
