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
)

// Exit codes.
const (
	exitOK    = 0 // success
	exitError = 1 // the command ran and failed
	exitUsage = 2 // bad command line
)

// command is one subcommand: its usage line, a one-line summary, a longer
// help text, and the function that runs it with its own flag set.
type command struct {
	name  string
	usage string
	short string
	long  string
	run   func(ctx context.Context, env *env, args []string) error
}

// env carries the command's output streams.
type env struct {
	stdout, stderr io.Writer
}

// usageError marks a bad command line (exit 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func commands() []*command {
	return []*command{
		cmdDemo,
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without os.Exit, so that every defer runs and tests can call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			for _, c := range commands() {
				if c.name == args[1] {
					fmt.Fprintf(stdout, "usage: damacy %s\n\n%s\n", c.usage, c.long)
					return exitOK
				}
			}
			fmt.Fprintf(stderr, "damacy: unknown command %q\n", args[1])
			return exitUsage
		}
		printHelp(stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, e, args[1:])
		var ue *usageError
		switch {
		case err == nil:
			return exitOK
		case errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "damacy %s: %v\nusage: damacy %s\nrun 'damacy help %s' for details\n", c.name, err, c.usage, c.name)
			return exitUsage
		default:
			fmt.Fprintf(stderr, "damacy %s: error: %v\n", c.name, err)
			return exitError
		}
	}
	fmt.Fprintf(stderr, "damacy: unknown command %q\nrun 'damacy help' for usage\n", args[0])
	return exitUsage
}

func printHelp(w io.Writer) {
	var b strings.Builder
	b.WriteString("damacy streams crops out of sharded zarr / OME-NGFF stores onto NVIDIA GPUs.\n\nusage: damacy <command> [arguments]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.short)
	}
	b.WriteString("\nrun 'damacy help <command>' for a command's flags.\n\nexit codes: 0 success, 1 the command failed, 2 bad command line\n")
	io.WriteString(w, b.String())
}
