package cuda

import "structs"

// IPCMemHandle mirrors CUipcMemHandle in cuda.h: 64 opaque bytes that let
// another process map a device allocation. It is plain data, safe to send
// (as hex, say) to the other process.
type IPCMemHandle struct {
	_        structs.HostLayout
	Reserved [64]byte // char reserved[CU_IPC_HANDLE_SIZE]
}

// IPCMemFlags are the flags of OpenIPCMemHandle (CUipcMem_flags).
type IPCMemFlags uint32

// IPCMemLazyEnablePeerAccess (CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) enables
// peer access to the memory's device on demand.
const IPCMemLazyEnablePeerAccess IPCMemFlags = 1

// IPCHandle returns a handle that another process can open to map the
// allocation containing p. The handle covers the whole allocation (send
// the offset of p within it alongside); p must come from MemAlloc, not
// from a stream-ordered pool. It wraps cuIpcGetMemHandle.
func (p DevicePtr) IPCHandle() (IPCMemHandle, error) {
	d, err := api()
	if err != nil {
		return IPCMemHandle{}, err
	}
	var h IPCMemHandle
	if err := checkArg("cuIpcGetMemHandle", p.String(), d.cuIpcGetMemHandle(&h, p)); err != nil {
		return IPCMemHandle{}, err
	}
	return h, nil
}

// OpenIPCMemHandle maps an allocation exported by another process (a
// handle from this process is refused) into the current context and
// returns its address. Unmap it with CloseIPCMemHandle. It wraps
// cuIpcOpenMemHandle_v2, which takes the handle by value.
func OpenIPCMemHandle(h IPCMemHandle, flags IPCMemFlags) (DevicePtr, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var p DevicePtr
	if err := check("cuIpcOpenMemHandle_v2", d.cuIpcOpenMemHandle_v2(&p, h, flags)); err != nil {
		return 0, err
	}
	return p, nil
}

// CloseIPCMemHandle unmaps memory from OpenIPCMemHandle and zeroes *p;
// safe to repeat. It wraps cuIpcCloseMemHandle.
func CloseIPCMemHandle(p *DevicePtr) error {
	if *p == 0 {
		return nil
	}
	d, err := api()
	if err != nil {
		return err
	}
	if err := check("cuIpcCloseMemHandle", d.cuIpcCloseMemHandle(*p)); err != nil {
		return err
	}
	*p = 0
	return nil
}
