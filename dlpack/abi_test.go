package dlpack

import (
	"testing"
	"unsafe"
)

// The sizes and offsets of dlpack.h's structs on LP64 (x86-64, arm64).
var layoutTests = []struct {
	name      string
	got, want uintptr
}{
	{"sizeof(DLDevice)", unsafe.Sizeof(Device{}), 8},
	{"offsetof(DLDevice, device_type)", unsafe.Offsetof(Device{}.Type), 0},
	{"offsetof(DLDevice, device_id)", unsafe.Offsetof(Device{}.ID), 4},

	{"sizeof(DLDataType)", unsafe.Sizeof(DataType{}), 4},
	{"offsetof(DLDataType, code)", unsafe.Offsetof(DataType{}.Code), 0},
	{"offsetof(DLDataType, bits)", unsafe.Offsetof(DataType{}.Bits), 1},
	{"offsetof(DLDataType, lanes)", unsafe.Offsetof(DataType{}.Lanes), 2},

	{"sizeof(DLTensor)", unsafe.Sizeof(Tensor{}), 48},
	{"offsetof(DLTensor, data)", unsafe.Offsetof(Tensor{}.Data), 0},
	{"offsetof(DLTensor, device)", unsafe.Offsetof(Tensor{}.Device), 8},
	{"offsetof(DLTensor, ndim)", unsafe.Offsetof(Tensor{}.NDim), 16},
	{"offsetof(DLTensor, dtype)", unsafe.Offsetof(Tensor{}.DType), 20},
	{"offsetof(DLTensor, shape)", unsafe.Offsetof(Tensor{}.Shape), 24},
	{"offsetof(DLTensor, strides)", unsafe.Offsetof(Tensor{}.Strides), 32},
	{"offsetof(DLTensor, byte_offset)", unsafe.Offsetof(Tensor{}.ByteOffset), 40},

	{"sizeof(DLManagedTensor)", unsafe.Sizeof(ManagedTensor{}), 64},
	{"offsetof(DLManagedTensor, dl_tensor)", unsafe.Offsetof(ManagedTensor{}.DLTensor), 0},
	{"offsetof(DLManagedTensor, manager_ctx)", unsafe.Offsetof(ManagedTensor{}.ManagerCtx), 48},
	{"offsetof(DLManagedTensor, deleter)", unsafe.Offsetof(ManagedTensor{}.Deleter), 56},

	{"sizeof(DLPackVersion)", unsafe.Sizeof(PackVersion{}), 8},
	{"offsetof(DLPackVersion, major)", unsafe.Offsetof(PackVersion{}.Major), 0},
	{"offsetof(DLPackVersion, minor)", unsafe.Offsetof(PackVersion{}.Minor), 4},

	{"sizeof(DLManagedTensorVersioned)", unsafe.Sizeof(ManagedTensorVersioned{}), 80},
	{"offsetof(DLManagedTensorVersioned, version)", unsafe.Offsetof(ManagedTensorVersioned{}.Version), 0},
	{"offsetof(DLManagedTensorVersioned, manager_ctx)", unsafe.Offsetof(ManagedTensorVersioned{}.ManagerCtx), 8},
	{"offsetof(DLManagedTensorVersioned, deleter)", unsafe.Offsetof(ManagedTensorVersioned{}.Deleter), 16},
	{"offsetof(DLManagedTensorVersioned, flags)", unsafe.Offsetof(ManagedTensorVersioned{}.Flags), 24},
	{"offsetof(DLManagedTensorVersioned, dl_tensor)", unsafe.Offsetof(ManagedTensorVersioned{}.DLTensor), 32},

	{"alignof(DLTensor)", unsafe.Alignof(Tensor{}), 8},
	{"alignof(DLManagedTensorVersioned)", unsafe.Alignof(ManagedTensorVersioned{}), 8},
}

func TestLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("dlpack: the layouts are those of LP64 platforms")
	}
	for _, tt := range layoutTests {
		if tt.got != tt.want {
			t.Errorf("%s = %d; want %d", tt.name, tt.got, tt.want)
		}
	}
}

// The enum values of dlpack.h.
var enumTests = []struct {
	name      string
	got, want int64
}{
	{"kDLCPU", int64(CPU), 1},
	{"kDLCUDA", int64(CUDA), 2},
	{"kDLCUDAHost", int64(CUDAHost), 3},
	{"kDLOpenCL", int64(OpenCL), 4},
	{"kDLVulkan", int64(Vulkan), 7},
	{"kDLMetal", int64(Metal), 8},
	{"kDLVPI", int64(VPI), 9},
	{"kDLROCM", int64(ROCM), 10},
	{"kDLROCMHost", int64(ROCMHost), 11},
	{"kDLExtDev", int64(ExtDev), 12},
	{"kDLCUDAManaged", int64(CUDAManaged), 13},
	{"kDLOneAPI", int64(OneAPI), 14},
	{"kDLWebGPU", int64(WebGPU), 15},
	{"kDLHexagon", int64(Hexagon), 16},
	{"kDLMAIA", int64(MAIA), 17},
	{"kDLTrn", int64(Trn), 18},
	{"kDLInt", int64(Int), 0},
	{"kDLUInt", int64(UInt), 1},
	{"kDLFloat", int64(Float), 2},
	{"kDLOpaqueHandle", int64(OpaqueHandle), 3},
	{"kDLBfloat", int64(Bfloat), 4},
	{"kDLComplex", int64(Complex), 5},
	{"kDLBool", int64(Bool), 6},
	{"DLPACK_FLAG_BITMASK_READ_ONLY", int64(FlagReadOnly), 1},
	{"DLPACK_FLAG_BITMASK_IS_COPIED", int64(FlagIsCopied), 2},
	{"DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED", int64(FlagIsSubbyteTypePadded), 4},
}

func TestEnums(t *testing.T) {
	for _, tt := range enumTests {
		if tt.got != tt.want {
			t.Errorf("%s = %d; want %d", tt.name, tt.got, tt.want)
		}
	}
}

var stringTests = []struct {
	got, want string
}{
	{Device{Type: CUDA, ID: 3}.String(), "cuda:3"},
	{Device{Type: CPU}.String(), "cpu"},
	{Device{Type: CUDAHost}.String(), "cuda_host:0"},
	{DeviceType(99).String(), "DLDeviceType(99)"},
	{Scalar(Float, 32).String(), "float32"},
	{Scalar(Bfloat, 16).String(), "bfloat16"},
	{Scalar(UInt, 16).String(), "uint16"},
	{Scalar(Bool, 8).String(), "bool"},
	{DataType{Code: Float, Bits: 32, Lanes: 4}.String(), "float32x4"},
	{Scalar(TypeCode(12), 8).String(), "DLDataType(code 12, bits 8)"},
	{Versioned.String(), "versioned"},
	{Legacy.String(), "legacy"},
	{Versioned.CapsuleName(), "dltensor_versioned"},
	{Legacy.CapsuleName(), "dltensor"},
}

func TestStrings(t *testing.T) {
	for _, tt := range stringTests {
		if tt.got != tt.want {
			t.Errorf("got %q; want %q", tt.got, tt.want)
		}
	}
}
