package pipeline

// sysMemfdCreate is memfd_create's number; package syscall's amd64 table
// predates it.
const sysMemfdCreate = 319
