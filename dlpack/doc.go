// Package dlpack declares the DLPack v1.x (DLManagedTensorVersioned) and
// v0.8 (DLManagedTensor) ABI structs with their exact C layouts, and
// exports tensors in C memory whose deleter releases the owner.
//
// Imports: the standard library and purego.
package dlpack
