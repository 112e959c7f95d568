//go:build !linux

package cuda

// HostMap returns n bytes of page-locked host memory; on this platform it
// is HostAlloc's (portable). It needs a current context.
func HostMap(n int) (*HostBuffer, error) { return HostAlloc(n, HostAllocPortable) }

func unmap([]byte) error { return nil }
