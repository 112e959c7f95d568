// Package cache holds the pipeline's caches: a single-flight LRU (of array
// metadata, shard indexes and object sizes), a zarr.Locator that plans
// through such LRUs, and the open-file cache the IO stage reads through.
//
// It is internal to the module. Package pipeline keeps its metadata, shard
// indexes and open files in it, and damacy bench's ceilings
// (cmd/damacy/internal/bench) read and plan through the same code a run
// does.
//
// Imports: the standard library and package zarr.
package cache
