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

// IPCEventHandle mirrors CUipcEventHandle in cuda.h: 64 opaque bytes that
// let another process use an event made with EventInterprocess. Like
// IPCMemHandle it is plain data.
type IPCEventHandle struct {
	_        structs.HostLayout
	Reserved [64]byte // char reserved[CU_IPC_HANDLE_SIZE]
}

// IPCHandle returns a handle that another process can open to wait on the
// event; e must have been created with EventInterprocess and
// EventDisableTiming. The handle stays valid as long as the event exists,
// whatever it is recorded on later. It wraps cuIpcGetEventHandle.
func (e Event) IPCHandle() (IPCEventHandle, error) {
	d, err := api()
	if err != nil {
		return IPCEventHandle{}, err
	}
	var h IPCEventHandle
	if err := check("cuIpcGetEventHandle", d.cuIpcGetEventHandle(&h, e)); err != nil {
		return IPCEventHandle{}, err
	}
	return h, nil
}

// OpenIPCEventHandle opens an event exported by another process into the
// current context. The event can be waited on (Stream.WaitEvent,
// Synchronize, Query) and recorded; Destroy it when done. It wraps
// cuIpcOpenEventHandle, which takes the handle by value.
func OpenIPCEventHandle(h IPCEventHandle) (Event, error) {
	d, err := api()
	if err != nil {
		return 0, err
	}
	var e Event
	if err := check("cuIpcOpenEventHandle", d.cuIpcOpenEventHandle(&e, h)); err != nil {
		return 0, err
	}
	return e, nil
}
