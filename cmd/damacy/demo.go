package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/damacy-go/damacy/cmd/damacy/internal/base"
	"github.com/damacy-go/damacy/cmd/damacy/internal/bench"
)

var cmdDemo = &command{
	name:  "demo",
	usage: "demo [--engine auto|host|cuda]",
	short: "generate a small dataset and stream batches from it",
	long: `Demo generates the smoke scenario's dataset in a temporary directory,
streams its batches with the best engine available (the CUDA engine when a
GPU is present, else the host engine), checks the first batch against the
reference reader, prints what ran and the throughput, and removes the
dataset. It takes seconds, on a GPU host or a small CPU-only one.`,
	setup: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		engine := fs.String("engine", "auto", "engine: auto, host, cuda or cuda:N")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 0 {
				return usagef("takes no arguments, got %d", len(args))
			}
			if _, err := base.EngineDevice(*engine); err != nil {
				return usagef("--engine %v", err)
			}
			sc, err := bench.LoadScenario("smoke")
			if err != nil {
				return err
			}
			sc.Run.Engine = *engine
			dir, err := os.MkdirTemp("", "damacy-demo-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			rep, err := bench.Run(ctx, e.bench(), sc, bench.Options{Data: dir, Verify: true})
			if err != nil {
				return err
			}
			w := e.stdout
			where := "in host memory"
			if rep.Device != "cpu" {
				where = "in GPU memory on " + rep.Device
				if rep.Host.GPU != "" {
					where += " (" + rep.Host.GPU + ")"
				}
			}
			decode := "on the CPU"
			if c := rep.Stats.Counters; c["chunks_gpu"] > 0 {
				decode = fmt.Sprintf("on the GPU for %d of %d chunks (%s)", c["chunks_gpu"], c["chunks_decoded"], rep.Decoder)
			}
			fmt.Fprintf(w, "engine:      %s: chunks decoded %s, batches assembled %s\n", rep.Engine, decode, where)
			fmt.Fprintf(w, "streamed:    %d batches of %d x %s %s from %d x %s %s\n", rep.Batches, rep.BatchSize, base.Shape(rep.SampleShape), rep.Dtype,
				sc.Dataset.Arrays, base.Shape(sc.Dataset.Shape), sc.Dataset.Dtype.At(0)+" "+sc.Dataset.Codec.At(0))
			fmt.Fprintf(w, "throughput:  %.3f GB/s of %s output, %.1f samples/s (wall %s, startup %s)\n", rep.OutputGBps, rep.Dtype, rep.SamplesPerS, rep.Wall.Round(time.Millisecond), rep.Startup.Round(time.Millisecond))
			fmt.Fprintf(w, "read:        amplification %.2f, %.3f GB/s from storage\n", rep.ReadAmp, rep.WireGBps)
			fmt.Fprintf(w, "checked:     batch 0 equals the reference reader's output\n")
			return nil
		}
	},
}
