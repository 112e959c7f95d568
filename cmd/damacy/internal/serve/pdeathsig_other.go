//go:build !linux

package serve

// SetParentDeathSignal does nothing outside Linux: the server still stops
// when the client's end of the socket closes.
func SetParentDeathSignal() error { return nil }
