//go:build !linux

package main

// setParentDeathSignal does nothing outside Linux: the server still stops
// when the client's end of the socket closes.
func setParentDeathSignal() error { return nil }
