package dlpack

import (
	"strconv"
	"structs"
)

// The structs in this file mirror dlpack.h (DLPack v1.x, which keeps the
// v0.8 structs for DLManagedTensor) on LP64 platforms. Every one starts
// with structs.HostLayout; abi_test.go asserts each size and offset.

// DeviceType is DLDeviceType, a C enum (int32).
type DeviceType int32

// Device types from dlpack.h. The exporter accepts CPU, CUDA, CUDAHost and
// CUDAManaged; the others are listed so that values read back print well.
const (
	CPU         DeviceType = 1  // kDLCPU: ordinary host memory
	CUDA        DeviceType = 2  // kDLCUDA: CUDA device memory
	CUDAHost    DeviceType = 3  // kDLCUDAHost: page-locked host memory (cuMemAllocHost)
	OpenCL      DeviceType = 4  // kDLOpenCL
	Vulkan      DeviceType = 7  // kDLVulkan
	Metal       DeviceType = 8  // kDLMetal
	VPI         DeviceType = 9  // kDLVPI
	ROCM        DeviceType = 10 // kDLROCM
	ROCMHost    DeviceType = 11 // kDLROCMHost
	ExtDev      DeviceType = 12 // kDLExtDev
	CUDAManaged DeviceType = 13 // kDLCUDAManaged: unified memory (cuMemAllocManaged)
	OneAPI      DeviceType = 14 // kDLOneAPI
	WebGPU      DeviceType = 15 // kDLWebGPU
	Hexagon     DeviceType = 16 // kDLHexagon
	MAIA        DeviceType = 17 // kDLMAIA
	Trn         DeviceType = 18 // kDLTrn (DLPack 1.2)
)

var deviceTypeNames = map[DeviceType]string{
	CPU: "cpu", CUDA: "cuda", CUDAHost: "cuda_host", OpenCL: "opencl",
	Vulkan: "vulkan", Metal: "metal", VPI: "vpi", ROCM: "rocm",
	ROCMHost: "rocm_host", ExtDev: "ext_dev", CUDAManaged: "cuda_managed",
	OneAPI: "oneapi", WebGPU: "webgpu", Hexagon: "hexagon", MAIA: "maia",
	Trn: "trn",
}

// String returns the lowercase device name ("cuda", "cpu", ...), or
// "DLDeviceType(N)" for a code dlpack.h does not define.
func (t DeviceType) String() string {
	if s, ok := deviceTypeNames[t]; ok {
		return s
	}
	return "DLDeviceType(" + strconv.Itoa(int(t)) + ")"
}

// Device is DLDevice.
//
//	typedef struct { DLDeviceType device_type; int32_t device_id; } DLDevice;
type Device struct {
	_    structs.HostLayout
	Type DeviceType // device_type @0
	ID   int32      // device_id @4: the CUDA ordinal; 0 for CPU
}

// String formats the device the way PyTorch does: "cuda:0", "cpu".
func (d Device) String() string {
	if d.Type == CPU {
		return "cpu"
	}
	return d.Type.String() + ":" + strconv.Itoa(int(d.ID))
}

// TypeCode is DLDataTypeCode (stored as uint8 in DLDataType).
type TypeCode uint8

// Data type codes from dlpack.h. DLPack 1.1 adds fp8, fp6 and fp4 codes
// (7 to 17); the exporter does not produce them.
const (
	Int          TypeCode = 0 // kDLInt: signed integer
	UInt         TypeCode = 1 // kDLUInt: unsigned integer
	Float        TypeCode = 2 // kDLFloat: IEEE floating point
	OpaqueHandle TypeCode = 3 // kDLOpaqueHandle
	Bfloat       TypeCode = 4 // kDLBfloat: bfloat16
	Complex      TypeCode = 5 // kDLComplex: two floats
	Bool         TypeCode = 6 // kDLBool
)

// DataType is DLDataType: a scalar type code, its width in bits, and the
// number of vector lanes (1 for every tensor this package exports).
//
//	typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
type DataType struct {
	_     structs.HostLayout
	Code  TypeCode // code @0
	Bits  uint8    // bits @1
	Lanes uint16   // lanes @2
}

// Scalar returns the one-lane DataType with the given code and width:
// Scalar(Float, 32) is float32, Scalar(Bfloat, 16) is bfloat16.
func Scalar(code TypeCode, bits uint8) DataType {
	return DataType{Code: code, Bits: bits, Lanes: 1}
}

// String names the type the way NumPy and PyTorch do ("float32",
// "bfloat16", "uint16"), with "xN" appended for N > 1 lanes.
func (d DataType) String() string {
	var s string
	switch d.Code {
	case Int:
		s = "int" + strconv.Itoa(int(d.Bits))
	case UInt:
		s = "uint" + strconv.Itoa(int(d.Bits))
	case Float:
		s = "float" + strconv.Itoa(int(d.Bits))
	case Bfloat:
		s = "bfloat" + strconv.Itoa(int(d.Bits))
	case Complex:
		s = "complex" + strconv.Itoa(int(d.Bits))
	case Bool:
		s = "bool"
	default:
		s = "DLDataType(code " + strconv.Itoa(int(d.Code)) + ", bits " + strconv.Itoa(int(d.Bits)) + ")"
	}
	if d.Lanes != 1 {
		s += "x" + strconv.Itoa(int(d.Lanes))
	}
	return s
}

// Tensor is DLTensor: a view of memory, with no ownership.
//
//	typedef struct {
//	  void* data; DLDevice device; int32_t ndim; DLDataType dtype;
//	  int64_t* shape; int64_t* strides; uint64_t byte_offset;
//	} DLTensor;
//
// Data, Shape and Strides are C or device addresses, never Go pointers.
// Strides count elements, not bytes.
type Tensor struct {
	_          structs.HostLayout
	Data       uintptr  // data @0: device or host address
	Device     Device   // device @8
	NDim       int32    // ndim @16
	DType      DataType // dtype @20
	Shape      uintptr  // shape @24: int64_t[ndim]
	Strides    uintptr  // strides @32: int64_t[ndim], in elements
	ByteOffset uint64   // byte_offset @40: added to Data by the consumer
}

// ManagedTensor is DLManagedTensor, the legacy (DLPack 0.x) managed
// struct, carried in a PyCapsule named "dltensor".
//
//	typedef struct DLManagedTensor {
//	  DLTensor dl_tensor; void* manager_ctx;
//	  void (*deleter)(struct DLManagedTensor* self);
//	} DLManagedTensor;
type ManagedTensor struct {
	_          structs.HostLayout
	DLTensor   Tensor  // dl_tensor @0
	ManagerCtx uintptr // manager_ctx @48
	Deleter    uintptr // deleter @56: void (*)(DLManagedTensor*)
}

// PackVersion is DLPackVersion.
//
//	typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
type PackVersion struct {
	_     structs.HostLayout
	Major uint32 // major @0
	Minor uint32 // minor @4
}

// The DLPack version this package writes into ManagedTensorVersioned.
// Consumers reject a major version newer than theirs; the structs written
// here are those of DLPack 1.0 (with strides always set, as 1.2 requires).
const (
	MajorVersion = 1
	MinorVersion = 0
)

// Flags is the flags word of ManagedTensorVersioned.
type Flags uint64

// Flag bits from dlpack.h (DLPACK_FLAG_BITMASK_*).
const (
	FlagReadOnly            Flags = 1 << 0 // the consumer must not write the data
	FlagIsCopied            Flags = 1 << 1 // the producer copied the data for this export
	FlagIsSubbyteTypePadded Flags = 1 << 2 // sub-byte elements are padded to whole bytes
)

// ManagedTensorVersioned is DLManagedTensorVersioned (DLPack 1.x),
// carried in a PyCapsule named "dltensor_versioned".
//
//	typedef struct DLManagedTensorVersioned {
//	  DLPackVersion version; void* manager_ctx;
//	  void (*deleter)(struct DLManagedTensorVersioned* self);
//	  uint64_t flags; DLTensor dl_tensor;
//	} DLManagedTensorVersioned;
type ManagedTensorVersioned struct {
	_          structs.HostLayout
	Version    PackVersion // version @0
	ManagerCtx uintptr     // manager_ctx @8
	Deleter    uintptr     // deleter @16: void (*)(DLManagedTensorVersioned*)
	Flags      Flags       // flags @24
	DLTensor   Tensor      // dl_tensor @32
}

// Capsule names from the Python specification of DLPack. A consumer
// renames a capsule it has taken ownership of to the "used_" form, after
// which the producer's capsule destructor must not call the deleter.
const (
	CapsuleName              = "dltensor"
	CapsuleNameUsed          = "used_dltensor"
	CapsuleNameVersioned     = "dltensor_versioned"
	CapsuleNameVersionedUsed = "used_dltensor_versioned"
)
