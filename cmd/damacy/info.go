package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/damacy-go/damacy/cuda"
	"github.com/damacy-go/damacy/nvcomp"
	"github.com/damacy-go/damacy/pipeline"
)

var cmdInfo = &command{
	name:  "info",
	usage: "info [--json]",
	short: "show the CUDA driver, GPUs, nvCOMP and the engine a pipeline would use",
	long: `Info reports what this host offers the pipeline: the CUDA driver version,
each GPU (name, compute capability, memory, PCI address and PCIe link),
the nvCOMP library (version and file, or every place it was looked for and
why each failed), and the engine and decoder a pipeline with the default
device would use. Without a driver it says so and still reports the rest.

Environment: DAMACY_LIBCUDA names the driver library, DAMACY_NVCOMP the
nvCOMP library to load.`,
	setup: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
		asJSON := fs.Bool("json", false, "write JSON instead of text")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 0 {
				return usagef("takes no arguments, got %d", len(args))
			}
			r := gatherInfo()
			if *asJSON {
				return writeJSON(e.stdout, r)
			}
			r.writeText(e.stdout)
			return nil
		}
	},
}

// hostInfo is what info reports.
type hostInfo struct {
	Driver      *driverInfo `json:"driver"` // nil without a usable driver
	DriverError string      `json:"driver_error,omitempty"`
	GPUs        []gpuInfo   `json:"gpus"`
	NVCOMP      nvcompInfo  `json:"nvcomp"`
	Engine      string      `json:"engine"`  // what pipeline.New picks by default
	Decoder     string      `json:"decoder"` // and what decodes chunks there
	EngineError string      `json:"engine_error,omitempty"`
}

type driverInfo struct {
	CUDAVersion string `json:"cuda_version"` // the CUDA version the driver supports, "13.0"
}

type gpuInfo struct {
	Ordinal      int    `json:"ordinal"`
	Name         string `json:"name"`
	Compute      string `json:"compute_capability"`
	MemoryBytes  int64  `json:"memory_bytes"`
	Multiproc    int    `json:"multiprocessors"`
	PCIBusID     string `json:"pci_bus_id"`
	LinkSpeed    string `json:"pcie_link_speed,omitempty"` // current, from sysfs
	LinkWidth    string `json:"pcie_link_width,omitempty"`
	MaxLinkSpeed string `json:"pcie_max_link_speed,omitempty"`
	MaxLinkWidth string `json:"pcie_max_link_width,omitempty"`
	Error        string `json:"error,omitempty"`
}

type nvcompInfo struct {
	Loaded      bool            `json:"loaded"`
	Version     string          `json:"version,omitempty"`
	CUDARuntime string          `json:"cuda_runtime,omitempty"`
	Path        string          `json:"path,omitempty"`
	Attempts    []nvcompAttempt `json:"attempts,omitempty"` // candidates that could not be used
	Error       string          `json:"error,omitempty"`
}

type nvcompAttempt struct {
	Path  string `json:"path"`
	Error string `json:"error"`
}

func gatherInfo() *hostInfo {
	r := &hostInfo{GPUs: []gpuInfo{}}
	if v, err := cuda.DriverVersion(); err != nil {
		r.DriverError = err.Error()
	} else {
		r.Driver = &driverInfo{CUDAVersion: fmt.Sprintf("%d.%d", v/1000, v%1000/10)}
		n, err := cuda.DeviceCount()
		if err != nil {
			r.DriverError = err.Error()
		}
		for i := range n {
			r.GPUs = append(r.GPUs, describeGPU(i))
		}
	}
	r.NVCOMP = gatherNVCOMP()
	p, err := pipeline.New(pipeline.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		r.EngineError = err.Error()
	} else {
		st := p.Stats()
		r.Engine, r.Decoder = st.Engine, st.Decoder
		if err := p.Close(); err != nil && r.EngineError == "" {
			r.EngineError = err.Error()
		}
	}
	return r
}

// gatherNVCOMP loads nvCOMP as a pipeline would (nvcomp.Load, which does
// not touch the GPU) and says which library that is, or why there is none.
func gatherNVCOMP() nvcompInfo {
	lib, err := nvcomp.Load()
	if err != nil {
		n := nvcompInfo{Error: err.Error()}
		var le *nvcomp.LoadError
		if errors.As(err, &le) {
			n.Error = "no usable library"
			n.Attempts = attempts(le.Attempts)
		}
		return n
	}
	return nvcompInfo{
		Loaded:      true,
		Version:     fmt.Sprint(lib.Version),
		CUDARuntime: fmt.Sprint(lib.CUDARuntime),
		Path:        lib.Path,
		Attempts:    attempts(lib.Skipped),
	}
}

func attempts(as []nvcomp.Attempt) []nvcompAttempt {
	out := make([]nvcompAttempt, len(as))
	for i, a := range as {
		out[i] = nvcompAttempt{Path: a.Path, Error: a.Err.Error()}
	}
	return out
}

func describeGPU(i int) gpuInfo {
	g := gpuInfo{Ordinal: i}
	fail := func(err error) gpuInfo {
		g.Error = err.Error()
		return g
	}
	dev, err := cuda.GetDevice(i)
	if err != nil {
		return fail(err)
	}
	if g.Name, err = dev.Name(); err != nil {
		return fail(err)
	}
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		return fail(err)
	}
	g.Compute = fmt.Sprintf("%d.%d", major, minor)
	mem, err := dev.TotalMem()
	if err != nil {
		return fail(err)
	}
	g.MemoryBytes = int64(mem)
	if g.Multiproc, err = dev.Attribute(cuda.DevAttrMultiprocessorCount); err != nil {
		return fail(err)
	}
	if g.PCIBusID, err = dev.PCIBusID(); err != nil {
		return fail(err)
	}
	if dir, ok := sysfsPCIDir(g.PCIBusID); ok {
		g.LinkSpeed = readSysfs(dir, "current_link_speed")
		g.LinkWidth = readSysfs(dir, "current_link_width")
		g.MaxLinkSpeed = readSysfs(dir, "max_link_speed")
		g.MaxLinkWidth = readSysfs(dir, "max_link_width")
	}
	return g
}

// sysfsPCIDir maps a CUDA PCI bus id ("00000000:1B:00.0") to its sysfs
// directory, which spells the domain with four hex digits in lower case.
func sysfsPCIDir(busID string) (string, bool) {
	dom, rest, ok := strings.Cut(strings.ToLower(busID), ":")
	if !ok {
		return "", false
	}
	d, err := strconv.ParseUint(dom, 16, 32)
	if err != nil {
		return "", false
	}
	dir := filepath.Join("/sys/bus/pci/devices", fmt.Sprintf("%04x:%s", d, rest))
	if _, err := os.Stat(dir); err != nil {
		return "", false
	}
	return dir, true
}

func readSysfs(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// pcieGen names the PCIe generation of a sysfs link speed ("32.0 GT/s PCIe").
func pcieGen(speed string) string {
	f := strings.Fields(speed)
	if len(f) == 0 {
		return ""
	}
	gens := map[string]string{"2.5": "1", "5.0": "2", "5": "2", "8.0": "3", "8": "3", "16.0": "4", "16": "4", "32.0": "5", "32": "5", "64.0": "6", "64": "6"}
	if g, ok := gens[f[0]]; ok {
		return "Gen" + g
	}
	return ""
}

func (r *hostInfo) writeText(w io.Writer) {
	if r.Driver == nil {
		fmt.Fprintf(w, "driver:   none (%s)\n", r.DriverError)
	} else {
		fmt.Fprintf(w, "driver:   CUDA %s\n", r.Driver.CUDAVersion)
		if r.DriverError != "" {
			fmt.Fprintf(w, "          %s\n", r.DriverError)
		}
		if len(r.GPUs) == 0 {
			fmt.Fprintf(w, "gpus:     none\n")
		}
	}
	for _, g := range r.GPUs {
		if g.Error != "" {
			fmt.Fprintf(w, "gpu %d:    %s\n", g.Ordinal, g.Error)
			continue
		}
		fmt.Fprintf(w, "gpu %d:    %s, compute %s, %d SMs, %.1f GiB, PCI %s\n", g.Ordinal, g.Name, g.Compute, g.Multiproc, float64(g.MemoryBytes)/(1<<30), g.PCIBusID)
		if g.LinkSpeed != "" {
			link := fmt.Sprintf("%s x%s (%s)", pcieGen(g.LinkSpeed), g.LinkWidth, g.LinkSpeed)
			if g.MaxLinkSpeed != "" && (g.MaxLinkSpeed != g.LinkSpeed || g.MaxLinkWidth != g.LinkWidth) {
				link += fmt.Sprintf("; max %s x%s", pcieGen(g.MaxLinkSpeed), g.MaxLinkWidth)
			}
			fmt.Fprintf(w, "          PCIe link %s\n", link)
		}
	}
	r.NVCOMP.writeText(w)
	if r.EngineError != "" {
		fmt.Fprintf(w, "engine:   none: %s\n", r.EngineError)
	} else {
		fmt.Fprintf(w, "engine:   %s (decoder: %s)\n", r.Engine, r.Decoder)
	}
}

// writeText writes the "nvcomp:" line and the candidates skipped or tried.
func (n *nvcompInfo) writeText(w io.Writer) {
	if n.Loaded {
		fmt.Fprintf(w, "nvcomp:   %s (CUDA runtime %s) from %s\n", n.Version, n.CUDARuntime, n.Path)
		for _, a := range n.Attempts {
			fmt.Fprintf(w, "          skipped %s: %s\n", a.Path, a.Error)
		}
		return
	}
	fmt.Fprintf(w, "nvcomp:   not used: %s; chunks decode on the CPU\n", n.Error)
	for _, a := range n.Attempts {
		fmt.Fprintf(w, "          tried %s: %s\n", a.Path, a.Error)
	}
}
