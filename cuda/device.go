package cuda

import (
	"bytes"
	"strconv"
)

// Device is a CUdevice: a handle for one GPU, obtained from GetDevice.
type Device int32

// DeviceAttribute is a CUdevice_attribute, the argument of
// Device.Attribute.
type DeviceAttribute int32

// Device attributes the project reads (values from cuda.h).
const (
	DevAttrMaxThreadsPerBlock            DeviceAttribute = 1   // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
	DevAttrMaxBlockDimX                  DeviceAttribute = 2   // CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X
	DevAttrMaxGridDimX                   DeviceAttribute = 5   // CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X
	DevAttrMaxGridDimY                   DeviceAttribute = 6   // CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y
	DevAttrMaxGridDimZ                   DeviceAttribute = 7   // CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z
	DevAttrMaxSharedMemoryPerBlock       DeviceAttribute = 8   // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK
	DevAttrWarpSize                      DeviceAttribute = 10  // CU_DEVICE_ATTRIBUTE_WARP_SIZE
	DevAttrMultiprocessorCount           DeviceAttribute = 16  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	DevAttrIntegrated                    DeviceAttribute = 18  // CU_DEVICE_ATTRIBUTE_INTEGRATED
	DevAttrCanMapHostMemory              DeviceAttribute = 19  // CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY
	DevAttrPCIBusID                      DeviceAttribute = 33  // CU_DEVICE_ATTRIBUTE_PCI_BUS_ID
	DevAttrPCIDeviceID                   DeviceAttribute = 34  // CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID
	DevAttrMemoryClockRate               DeviceAttribute = 36  // CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE (kHz)
	DevAttrGlobalMemoryBusWidth          DeviceAttribute = 37  // CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH (bits)
	DevAttrL2CacheSize                   DeviceAttribute = 38  // CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE (bytes)
	DevAttrMaxThreadsPerMultiprocessor   DeviceAttribute = 39  // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
	DevAttrAsyncEngineCount              DeviceAttribute = 40  // CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT
	DevAttrUnifiedAddressing             DeviceAttribute = 41  // CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING
	DevAttrPCIDomainID                   DeviceAttribute = 50  // CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID
	DevAttrComputeCapabilityMajor        DeviceAttribute = 75  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	DevAttrComputeCapabilityMinor        DeviceAttribute = 76  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
	DevAttrMaxSharedMemoryPerBlockOptin  DeviceAttribute = 97  // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
	DevAttrMemoryPoolsSupported          DeviceAttribute = 115 // CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
	DevAttrReadOnlyHostRegisterSupported DeviceAttribute = 113 // CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED
)

// DriverVersion returns the CUDA version the driver supports, as
// 1000*major + 10*minor (13000 for CUDA 13.0). It wraps cuDriverGetVersion.
func DriverVersion() (int, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var v int32
	if err := check("cuDriverGetVersion", d.cuDriverGetVersion(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount returns the number of CUDA devices. It wraps
// cuDeviceGetCount.
func DeviceCount() (int, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var n int32
	if err := check("cuDeviceGetCount", d.cuDeviceGetCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// GetDevice returns the device with the given ordinal (0 ≤ ordinal <
// DeviceCount). It wraps cuDeviceGet; a bad ordinal matches ErrNoDevice.
func GetDevice(ordinal int) (Device, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var dev Device
	if err := checkArg("cuDeviceGet", "ordinal "+strconv.Itoa(ordinal), d.cuDeviceGet(&dev, int32(ordinal))); err != nil {
		return 0, err
	}
	return dev, nil
}

// Name returns the device's product name. It wraps cuDeviceGetName.
func (dev Device) Name() (string, error) {
	d, err := api()
	if err != nil {
		return "", err
	}
	var b [256]byte
	if err := check("cuDeviceGetName", d.cuDeviceGetName(&b[0], int32(len(b)), dev)); err != nil {
		return "", err
	}
	return cstring(b[:]), nil
}

// Attribute returns one attribute of the device. It wraps
// cuDeviceGetAttribute.
func (dev Device) Attribute(a DeviceAttribute) (int, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var v int32
	if err := checkArg("cuDeviceGetAttribute", "attribute "+strconv.Itoa(int(a)), d.cuDeviceGetAttribute(&v, a, dev)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// ComputeCapability returns the device's compute capability (9, 0 for an
// H100). It reads DevAttrComputeCapabilityMajor and Minor.
func (dev Device) ComputeCapability() (major, minor int, err error) {
	major, err = dev.Attribute(DevAttrComputeCapabilityMajor)
	if err != nil {
		return 0, 0, err
	}
	minor, err = dev.Attribute(DevAttrComputeCapabilityMinor)
	if err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// TotalMem returns the device's memory in bytes. It wraps
// cuDeviceTotalMem_v2.
func (dev Device) TotalMem() (int, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var n uintptr
	if err := check("cuDeviceTotalMem_v2", d.cuDeviceTotalMem_v2(&n, dev)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// PCIBusID returns the device's PCI address as
// "domain:bus:device.function" in hex, e.g. "0000:1b:00.0". It wraps
// cuDeviceGetPCIBusId.
func (dev Device) PCIBusID() (string, error) {
	d, err := api()
	if err != nil {
		return "", err
	}
	var b [64]byte
	if err := check("cuDeviceGetPCIBusId", d.cuDeviceGetPCIBusId(&b[0], int32(len(b)), dev)); err != nil {
		return "", err
	}
	return cstring(b[:]), nil
}

// cstring returns the text of b up to its first NUL.
func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
