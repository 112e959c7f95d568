// Package dlpack declares the DLPack v1.x (DLManagedTensorVersioned) and
// v0.8 (DLManagedTensor) ABI structs with their exact C layouts, and
// exports tensors in C memory whose deleter releases the owner.
//
// Export writes one malloc'd block per tensor: the managed struct, then
// the shape and the C-order strides (filled for every rank above 0, as
// DLPack 1.2 requires). The data is not copied: the Owner keeps it alive
// (for a pipeline batch, a reference on the batch slot) until Release. The block's deleter is one of two C
// callbacks created once per process; it finds the export through the
// block's address and the id in manager_ctx, frees the block and calls
// the Owner's Release exactly once. It is safe to call from any thread.
// A second call for the same block does nothing as long as malloc has not
// handed the address to a newer export; DLPack allows a consumer exactly
// one call, so only a broken consumer could tell.
//
// A typical hand-over to Python, where the consumer asked for stream s:
//
//	m, err := dlpack.Export(desc, dlpack.Versioned, owner)
//	...
//	err = dlpack.Synchronize(desc.Device, s, waiter) // data ready on s
//	capsule := PyCapsule_New(m.Ptr(), "dltensor_versioned", NULL)
//
// If the capsule is never consumed, m.Delete() ends the export.
//
// Imports: the standard library and purego.
package dlpack
