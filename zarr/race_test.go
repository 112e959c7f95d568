//go:build race

package zarr

// raceEnabled is set when the race detector is on; it changes allocation
// counts (sync.Pool drops items at random), so allocation tests skip.
const raceEnabled = true
