package main

import (
	"context"
	"errors"
	"flag"
)

var cmdDemo = &command{
	name:  "demo",
	usage: "demo",
	short: "generate a small dataset and stream batches from it",
	long:  "Demo generates the smoke dataset in a temporary directory, streams batches\nwith the best engine available, prints what ran and the throughput, and\ncleans up.",
	run: func(ctx context.Context, e *env, args []string) error {
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		fs.SetOutput(e.stderr)
		if err := fs.Parse(args); err != nil {
			return err
		}
		return errors.New("the streaming pipeline is not built yet; nothing to demo")
	},
}
