//go:build !linux

package remote

import "net"

// lowWater leaves c as it is: the low-water mark of reads is set on Linux
// only (see lowat_linux.go).
func lowWater(c net.Conn) net.Conn { return c }
