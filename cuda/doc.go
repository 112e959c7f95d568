// Package cuda is a cgo-free binding of the CUDA driver API (libcuda.so.1),
// loaded at run time through purego.
//
// It owns: loading the driver library (once, lazily), the versioned driver
// symbols the project uses, typed handles (Device, Context, Stream, Event,
// DevicePtr, HostBuffer, Module, Function), the executor that keeps a
// context current on a locked OS thread, and the error type that carries
// the CUresult name and the failing call.
//
// Imports: the standard library and purego only. Every other GPU package
// builds on this one; it imports none of them.
package cuda
