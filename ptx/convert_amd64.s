//go:build !purego

#include "textflag.h"

// Reversal masks: bytes for VPSHUFB that reverse 8 words, and dword
// indexes for VPERMD that reverse 8 dwords.
DATA rev16<>+0(SB)/8, $0x09080b0a0d0c0f0e
DATA rev16<>+8(SB)/8, $0x0100030205040706
GLOBL rev16<>(SB), RODATA|NOPTR, $16
DATA rev32<>+0(SB)/8, $0x0000000600000007
DATA rev32<>+8(SB)/8, $0x0000000400000005
DATA rev32<>+16(SB)/8, $0x0000000200000003
DATA rev32<>+24(SB)/8, $0x0000000000000001
GLOBL rev32<>(SB), RODATA|NOPTR, $32

// The steps of convertAVX2's loops, eight elements each. A load reads
// the next 8 source elements at SI, widens them to int32 and converts
// them to float32 in Y0 (exact for 8- and 16-bit integers).
#define LDU8 VPMOVZXBD (SI), Y0; ADDQ $8, SI; VCVTDQ2PS Y0, Y0
#define LDU16 VPMOVZXWD (SI), Y0; ADDQ $16, SI; VCVTDQ2PS Y0, Y0
#define LDI16 VPMOVSXWD (SI), Y0; ADDQ $16, SI; VCVTDQ2PS Y0, Y0

// MAP is the intensity map: multiply by the scale, add the offset (two
// roundings, never fused), then clip: VMAXPS with lo first returns r
// unless lo > r, VMINPS with hi first r unless hi < r, which is the order
// of the scalar compares, signed zeros included. The result is never
// NaN: the values are integers and the scale and offset finite.
#define NOMAP
#define MAP VMULPS Y9, Y0, Y0; VADDPS Y10, Y0, Y0; VMAXPS Y0, Y11, Y0; VMINPS Y0, Y12, Y0

// BF16 rounds Y0 to bfloat16 to nearest even (bits + 0x7fff + bit 16,
// shifted down 16) and packs the 8 halves into X0.
#define BF16 VPSRLD $16, Y0, Y1; VPAND Y14, Y1, Y1; VPADDD Y15, Y0, Y0; VPADDD Y1, Y0, Y0; VPSRLD $16, Y0, Y0; VEXTRACTI128 $1, Y0, X1; VPACKUSDW X1, X0, X0

// The stores put element i at DI + i*DX: all at once (FWD, DX is the
// output size), all at once past the caches (NT: non-temporal stores, DI
// aligned to their width; the loop ends with SFENCE so that they are
// visible before whatever the caller stores next), reversed (REV, DX is minus the output size) or one at a
// time (ONE) through R9 and R10.
#define F32FWD VMOVUPS Y0, (DI)
#define F32REV VPERMD Y0, Y7, Y0; VMOVUPS Y0, -28(DI)
#define PUT2L MOVL R9, (R10); SHRQ $32, R9; ADDQ DX, R10; MOVL R9, (R10); ADDQ DX, R10
#define F32ONE MOVQ DI, R10; VEXTRACTI128 $1, Y0, X1; VMOVQ X0, R9; PUT2L; VPEXTRQ $1, X0, R9; PUT2L; VMOVQ X1, R9; PUT2L; VPEXTRQ $1, X1, R9; PUT2L
#define BF16FWD BF16; VMOVDQU X0, (DI)
#define F32NT VMOVNTPS Y0, (DI)
#define BF16NT BF16; VMOVNTDQ X0, (DI)
#define BF16REV BF16; VPSHUFB X8, X0, X0; VMOVDQU X0, -14(DI)
#define PUT4W MOVW R9, (R10); SHRQ $16, R9; ADDQ DX, R10; MOVW R9, (R10); SHRQ $16, R9; ADDQ DX, R10; MOVW R9, (R10); SHRQ $16, R9; ADDQ DX, R10; MOVW R9, (R10); ADDQ DX, R10
#define BF16ONE BF16; MOVQ DI, R10; VMOVQ X0, R9; PUT4W; VPEXTRQ $1, X0, R9; PUT4W

// LOOP is one of the loops: for each of R14 rows, from R12 and R13 on,
// steps of 8 elements over the row's first n&^7, then, where n is not a
// multiple of 8, one over its last 8, back BX and R8 bytes from where the
// steps ended; the rows are dr and sr bytes apart. end returns.
#define RETURN VZEROUPPER; RET
#define FENCED SFENCE; VZEROUPPER; RET
#define LOOP(name, steps, next, load, map, store, end) \
name: \
	MOVQ R12, DI; MOVQ R13, SI; MOVQ 16(AX), CX; ANDQ $-8, CX; \
steps: \
	load; map; store; \
	ADDQ R11, DI; SUBQ $8, CX; JNZ steps; \
	TESTQ R8, R8; JZ next; \
	SUBQ BX, DI; SUBQ R8, SI; \
	load; map; store; \
next: \
	ADDQ 48(AX), R12; ADDQ 56(AX), R13; \
	DECQ R14; JNZ name; \
	end

// KINDS jumps to the loop of row kind R9 (0 to 5) among six.
#define KINDS(a, b, c, d, e, f) CMPQ R9, $1; JLT a; JEQ b; CMPQ R9, $3; JLT c; JEQ d; CMPQ R9, $5; JLT e; JMP f

// MAPPED loads the intensity map m into Y9 to Y12.
#define MAPPED MOVQ m+16(FP), R9; VBROADCASTSS 0(R9), Y9; VBROADCASTSS 4(R9), Y10; VBROADCASTSS 8(R9), Y11; VBROADCASTSS 12(R9), Y12

// func convertAVX2(k rowKind, mode int, m *[4]float32, b *rowBlock)
// One loop per row kind, map or none, and store mode, chosen once per
// block. b's fields: d 0, s 8, n 16, rows 24, ds 32, ss 40, dr 48, sr 56.
TEXT ·convertAVX2(SB), NOSPLIT, $0-32
	MOVQ b+24(FP), AX
	MOVQ 0(AX), R12
	MOVQ 8(AX), R13
	MOVQ 24(AX), R14
	MOVQ 32(AX), DX
	MOVQ DX, R11
	SHLQ $3, R11             // 8*ds
	XORQ BX, BX
	XORQ R8, R8
	MOVQ 16(AX), CX
	ANDQ $7, CX
	JZ   consts
	NEGQ CX
	ADDQ $8, CX              // 8 - n%8: how far the last step goes back
	MOVQ CX, BX
	IMULQ DX, BX
	MOVQ CX, R8
	IMULQ 40(AX), R8

consts:
	VPCMPEQD Y14, Y14, Y14
	VPSRLD   $17, Y14, Y15   // 0x7fff in every lane
	VPSRLD   $31, Y14, Y14   // 1 in every lane
	MOVBQZX  k+0(FP), R9
	MOVQ     mode+8(FP), CX
	CMPQ     CX, $1
	JEQ      rev
	CMPQ     CX, $2
	JEQ      one
	CMPQ     CX, $3
	JEQ      nt
	CMPQ     m+16(FP), $0
	JNE      fwdmap
	KINDS(u8f32, u16f32, i16f32, u8bf16, u16bf16, i16bf16)

fwdmap:
	MAPPED
	MOVBQZX k+0(FP), R9
	KINDS(u8f32m, u16f32m, i16f32m, u8bf16m, u16bf16m, i16bf16m)

rev:
	VMOVDQU rev16<>(SB), X8
	VMOVDQU rev32<>(SB), Y7
	CMPQ    m+16(FP), $0
	JNE     revmap
	KINDS(u8f32r, u16f32r, i16f32r, u8bf16r, u16bf16r, i16bf16r)

revmap:
	MAPPED
	MOVBQZX k+0(FP), R9
	KINDS(u8f32rm, u16f32rm, i16f32rm, u8bf16rm, u16bf16rm, i16bf16rm)

nt:
	CMPQ m+16(FP), $0
	JNE  ntmap
	KINDS(u8f32n, u16f32n, i16f32n, u8bf16n, u16bf16n, i16bf16n)

ntmap:
	MAPPED
	MOVBQZX k+0(FP), R9
	KINDS(u8f32nm, u16f32nm, i16f32nm, u8bf16nm, u16bf16nm, i16bf16nm)

one:
	CMPQ m+16(FP), $0
	JNE  onemap
	KINDS(u8f32o, u16f32o, i16f32o, u8bf16o, u16bf16o, i16bf16o)

onemap:
	MAPPED
	MOVBQZX k+0(FP), R9
	KINDS(u8f32om, u16f32om, i16f32om, u8bf16om, u16bf16om, i16bf16om)

	LOOP(u8f32, u8f32_steps, u8f32_next, LDU8, NOMAP, F32FWD, RETURN)
	LOOP(u16f32, u16f32_steps, u16f32_next, LDU16, NOMAP, F32FWD, RETURN)
	LOOP(i16f32, i16f32_steps, i16f32_next, LDI16, NOMAP, F32FWD, RETURN)
	LOOP(u8bf16, u8bf16_steps, u8bf16_next, LDU8, NOMAP, BF16FWD, RETURN)
	LOOP(u16bf16, u16bf16_steps, u16bf16_next, LDU16, NOMAP, BF16FWD, RETURN)
	LOOP(i16bf16, i16bf16_steps, i16bf16_next, LDI16, NOMAP, BF16FWD, RETURN)
	LOOP(u8f32m, u8f32m_steps, u8f32m_next, LDU8, MAP, F32FWD, RETURN)
	LOOP(u16f32m, u16f32m_steps, u16f32m_next, LDU16, MAP, F32FWD, RETURN)
	LOOP(i16f32m, i16f32m_steps, i16f32m_next, LDI16, MAP, F32FWD, RETURN)
	LOOP(u8bf16m, u8bf16m_steps, u8bf16m_next, LDU8, MAP, BF16FWD, RETURN)
	LOOP(u16bf16m, u16bf16m_steps, u16bf16m_next, LDU16, MAP, BF16FWD, RETURN)
	LOOP(i16bf16m, i16bf16m_steps, i16bf16m_next, LDI16, MAP, BF16FWD, RETURN)
	LOOP(u8f32r, u8f32r_steps, u8f32r_next, LDU8, NOMAP, F32REV, RETURN)
	LOOP(u16f32r, u16f32r_steps, u16f32r_next, LDU16, NOMAP, F32REV, RETURN)
	LOOP(i16f32r, i16f32r_steps, i16f32r_next, LDI16, NOMAP, F32REV, RETURN)
	LOOP(u8bf16r, u8bf16r_steps, u8bf16r_next, LDU8, NOMAP, BF16REV, RETURN)
	LOOP(u16bf16r, u16bf16r_steps, u16bf16r_next, LDU16, NOMAP, BF16REV, RETURN)
	LOOP(i16bf16r, i16bf16r_steps, i16bf16r_next, LDI16, NOMAP, BF16REV, RETURN)
	LOOP(u8f32rm, u8f32rm_steps, u8f32rm_next, LDU8, MAP, F32REV, RETURN)
	LOOP(u16f32rm, u16f32rm_steps, u16f32rm_next, LDU16, MAP, F32REV, RETURN)
	LOOP(i16f32rm, i16f32rm_steps, i16f32rm_next, LDI16, MAP, F32REV, RETURN)
	LOOP(u8bf16rm, u8bf16rm_steps, u8bf16rm_next, LDU8, MAP, BF16REV, RETURN)
	LOOP(u16bf16rm, u16bf16rm_steps, u16bf16rm_next, LDU16, MAP, BF16REV, RETURN)
	LOOP(i16bf16rm, i16bf16rm_steps, i16bf16rm_next, LDI16, MAP, BF16REV, RETURN)
	LOOP(u8f32o, u8f32o_steps, u8f32o_next, LDU8, NOMAP, F32ONE, RETURN)
	LOOP(u16f32o, u16f32o_steps, u16f32o_next, LDU16, NOMAP, F32ONE, RETURN)
	LOOP(i16f32o, i16f32o_steps, i16f32o_next, LDI16, NOMAP, F32ONE, RETURN)
	LOOP(u8bf16o, u8bf16o_steps, u8bf16o_next, LDU8, NOMAP, BF16ONE, RETURN)
	LOOP(u16bf16o, u16bf16o_steps, u16bf16o_next, LDU16, NOMAP, BF16ONE, RETURN)
	LOOP(i16bf16o, i16bf16o_steps, i16bf16o_next, LDI16, NOMAP, BF16ONE, RETURN)
	LOOP(u8f32om, u8f32om_steps, u8f32om_next, LDU8, MAP, F32ONE, RETURN)
	LOOP(u16f32om, u16f32om_steps, u16f32om_next, LDU16, MAP, F32ONE, RETURN)
	LOOP(i16f32om, i16f32om_steps, i16f32om_next, LDI16, MAP, F32ONE, RETURN)
	LOOP(u8bf16om, u8bf16om_steps, u8bf16om_next, LDU8, MAP, BF16ONE, RETURN)
	LOOP(u16bf16om, u16bf16om_steps, u16bf16om_next, LDU16, MAP, BF16ONE, RETURN)
	LOOP(i16bf16om, i16bf16om_steps, i16bf16om_next, LDI16, MAP, BF16ONE, RETURN)
	LOOP(u8f32n, u8f32n_steps, u8f32n_next, LDU8, NOMAP, F32NT, FENCED)
	LOOP(u16f32n, u16f32n_steps, u16f32n_next, LDU16, NOMAP, F32NT, FENCED)
	LOOP(i16f32n, i16f32n_steps, i16f32n_next, LDI16, NOMAP, F32NT, FENCED)
	LOOP(u8bf16n, u8bf16n_steps, u8bf16n_next, LDU8, NOMAP, BF16NT, FENCED)
	LOOP(u16bf16n, u16bf16n_steps, u16bf16n_next, LDU16, NOMAP, BF16NT, FENCED)
	LOOP(i16bf16n, i16bf16n_steps, i16bf16n_next, LDI16, NOMAP, BF16NT, FENCED)
	LOOP(u8f32nm, u8f32nm_steps, u8f32nm_next, LDU8, MAP, F32NT, FENCED)
	LOOP(u16f32nm, u16f32nm_steps, u16f32nm_next, LDU16, MAP, F32NT, FENCED)
	LOOP(i16f32nm, i16f32nm_steps, i16f32nm_next, LDI16, MAP, F32NT, FENCED)
	LOOP(u8bf16nm, u8bf16nm_steps, u8bf16nm_next, LDU8, MAP, BF16NT, FENCED)
	LOOP(u16bf16nm, u16bf16nm_steps, u16bf16nm_next, LDU16, MAP, BF16NT, FENCED)
	LOOP(i16bf16nm, i16bf16nm_steps, i16bf16nm_next, LDI16, MAP, BF16NT, FENCED)
