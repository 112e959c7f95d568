//go:build !purego

#include "textflag.h"

// The masks of transposeRows' swaps, in every 64-bit lane.

DATA swapm4<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA swapm4<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA swapm4<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA swapm4<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL swapm4<>(SB), RODATA|NOPTR, $32

DATA swapm2<>+0(SB)/8, $0x3333333333333333
DATA swapm2<>+8(SB)/8, $0x3333333333333333
DATA swapm2<>+16(SB)/8, $0x3333333333333333
DATA swapm2<>+24(SB)/8, $0x3333333333333333
GLOBL swapm2<>(SB), RODATA|NOPTR, $32

DATA swapm1<>+0(SB)/8, $0x5555555555555555
DATA swapm1<>+8(SB)/8, $0x5555555555555555
DATA swapm1<>+16(SB)/8, $0x5555555555555555
DATA swapm1<>+24(SB)/8, $0x5555555555555555
GLOBL swapm1<>(SB), RODATA|NOPTR, $32

DATA swapb4<>+0(SB)/8, $0x00000000ffffffff
DATA swapb4<>+8(SB)/8, $0x00000000ffffffff
DATA swapb4<>+16(SB)/8, $0x00000000ffffffff
DATA swapb4<>+24(SB)/8, $0x00000000ffffffff
GLOBL swapb4<>(SB), RODATA|NOPTR, $32

DATA swapb2<>+0(SB)/8, $0x0000ffff0000ffff
DATA swapb2<>+8(SB)/8, $0x0000ffff0000ffff
DATA swapb2<>+16(SB)/8, $0x0000ffff0000ffff
DATA swapb2<>+24(SB)/8, $0x0000ffff0000ffff
GLOBL swapb2<>(SB), RODATA|NOPTR, $32

DATA swapb1<>+0(SB)/8, $0x00ff00ff00ff00ff
DATA swapb1<>+8(SB)/8, $0x00ff00ff00ff00ff
DATA swapb1<>+16(SB)/8, $0x00ff00ff00ff00ff
DATA swapb1<>+24(SB)/8, $0x00ff00ff00ff00ff
GLOBL swapb1<>(SB), RODATA|NOPTR, $32

// SWAP exchanges the bits of a selected by mask<<s with those of b
// selected by mask, in each 64-bit lane (swapBits); Y8 is scratch.
#define SWAP(a, b, s, mask) \
	VPSRLQ $s, a, Y8 \
	VPXOR  b, Y8, Y8 \
	VPAND  mask, Y8, Y8 \
	VPXOR  Y8, b, b \
	VPSLLQ $s, Y8, Y8 \
	VPXOR  Y8, a, a

// STORE4 transposes the 4x4 matrix of 64-bit words whose rows are a, b, c
// and d, and stores its rows at off, off+64, off+128 and off+192 from BX.
#define STORE4(a, b, c, d, off) \
	VPUNPCKLQDQ b, a, Y9 \
	VPUNPCKHQDQ b, a, Y10 \
	VPUNPCKLQDQ d, c, Y11 \
	VPUNPCKHQDQ d, c, Y12 \
	VPERM2I128  $0x20, Y11, Y9, Y13 \
	VMOVDQU     Y13, off(BX) \
	VPERM2I128  $0x20, Y12, Y10, Y13 \
	VMOVDQU     Y13, off+64(BX) \
	VPERM2I128  $0x31, Y11, Y9, Y13 \
	VMOVDQU     Y13, off+128(BX) \
	VPERM2I128  $0x31, Y12, Y10, Y13 \
	VMOVDQU     Y13, off+192(BX)

// func bitPlanesAVX2(dst, src unsafe.Pointer, rl, planes int)
//
// For each of planes planes of 8 bit-rows of rl bytes (rl >= 32), and each
// 32 row bytes g of them up to rl&^31: the 8 rows' 32 bytes go into Y0-Y7
// (64-bit lane l of Yk is row k's bytes g+8l..g+8l+7), each lane is
// transposed as transposeRows transposes eight words (lane l of Yj then
// holds the bytes of elements 8(g+8l+j)..+7), and the words, transposed
// 4x4 into element order, are stored at the plane's 8g.. 8g+255.
TEXT ·bitPlanesAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ rl+16(FP), CX
	MOVQ planes+24(FP), DX
	MOVQ CX, R8
	ANDQ $~31, R8          // row bytes done per plane
	LEAQ (CX)(CX*2), R10   // 3 rl
	LEAQ (CX)(CX*4), R11   // 5 rl
	LEAQ (R10)(R10*1), R12 // 6 rl
	LEAQ (R12)(CX*1), R13  // 7 rl
	LEAQ (CX*8), R9        // 8 rl: a plane's bit-rows, and its bytes

plane:
	XORQ AX, AX

loop:
	LEAQ    (SI)(AX*1), BX
	VMOVDQU (BX), Y0
	VMOVDQU (BX)(CX*1), Y1
	VMOVDQU (BX)(CX*2), Y2
	VMOVDQU (BX)(R10*1), Y3
	VMOVDQU (BX)(CX*4), Y4
	VMOVDQU (BX)(R11*1), Y5
	VMOVDQU (BX)(R12*1), Y6
	VMOVDQU (BX)(R13*1), Y7

	SWAP(Y0, Y4, 4, swapm4<>(SB))
	SWAP(Y1, Y5, 4, swapm4<>(SB))
	SWAP(Y2, Y6, 4, swapm4<>(SB))
	SWAP(Y3, Y7, 4, swapm4<>(SB))
	SWAP(Y0, Y2, 2, swapm2<>(SB))
	SWAP(Y1, Y3, 2, swapm2<>(SB))
	SWAP(Y4, Y6, 2, swapm2<>(SB))
	SWAP(Y5, Y7, 2, swapm2<>(SB))
	SWAP(Y0, Y1, 1, swapm1<>(SB))
	SWAP(Y2, Y3, 1, swapm1<>(SB))
	SWAP(Y4, Y5, 1, swapm1<>(SB))
	SWAP(Y6, Y7, 1, swapm1<>(SB))
	SWAP(Y0, Y4, 32, swapb4<>(SB))
	SWAP(Y1, Y5, 32, swapb4<>(SB))
	SWAP(Y2, Y6, 32, swapb4<>(SB))
	SWAP(Y3, Y7, 32, swapb4<>(SB))
	SWAP(Y0, Y2, 16, swapb2<>(SB))
	SWAP(Y1, Y3, 16, swapb2<>(SB))
	SWAP(Y4, Y6, 16, swapb2<>(SB))
	SWAP(Y5, Y7, 16, swapb2<>(SB))
	SWAP(Y0, Y1, 8, swapb1<>(SB))
	SWAP(Y2, Y3, 8, swapb1<>(SB))
	SWAP(Y4, Y5, 8, swapb1<>(SB))
	SWAP(Y6, Y7, 8, swapb1<>(SB))
	LEAQ (DI)(AX*8), BX
	STORE4(Y0, Y1, Y2, Y3, 0)
	STORE4(Y4, Y5, Y6, Y7, 32)
	ADDQ $32, AX
	CMPQ AX, R8
	JLT  loop
	ADDQ R9, SI
	ADDQ R9, DI
	DECQ DX
	JNZ  plane
	VZEROUPPER
	RET

// func unshuffleAVX2(dst, src unsafe.Pointer, n, ts int)
//
// Byte-unshuffles the first n&^31 elements (n >= 32) of a block of n
// elements of ts bytes, ts 2 or 4: plane b (byte b of every element) at
// src+b*n. 32 elements at a time: the planes' bytes are interleaved
// within 128-bit lanes (bytes, then for ts 4 words), and the lanes put in
// element order.
TEXT ·unshuffleAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ ts+24(FP), DX
	MOVQ CX, R8
	ANDQ $~31, R8
	XORQ AX, AX
	LEAQ (CX)(CX*2), R10 // 3n
	CMPQ DX, $4
	JEQ  four

two:
	VMOVDQU     (SI)(AX*1), Y0
	LEAQ        (SI)(AX*1), BX
	VMOVDQU     (BX)(CX*1), Y1
	VPUNPCKLBW  Y1, Y0, Y2 // elements 0-7 | 16-23
	VPUNPCKHBW  Y1, Y0, Y3 // elements 8-15 | 24-31
	VPERM2I128  $0x20, Y3, Y2, Y4
	VPERM2I128  $0x31, Y3, Y2, Y5
	LEAQ        (DI)(AX*2), BX
	VMOVDQU     Y4, (BX)
	VMOVDQU     Y5, 32(BX)
	ADDQ        $32, AX
	CMPQ        AX, R8
	JLT         two
	VZEROUPPER
	RET

four:
	LEAQ        (SI)(AX*1), BX
	VMOVDQU     (BX), Y0
	VMOVDQU     (BX)(CX*1), Y1
	VMOVDQU     (BX)(CX*2), Y2
	VMOVDQU     (BX)(R10*1), Y3
	VPUNPCKLBW  Y1, Y0, Y4 // bytes 0-1 of elements 0-7 | 16-23
	VPUNPCKHBW  Y1, Y0, Y5 // of elements 8-15 | 24-31
	VPUNPCKLBW  Y3, Y2, Y6 // bytes 2-3, likewise
	VPUNPCKHBW  Y3, Y2, Y7
	VPUNPCKLWD  Y6, Y4, Y0 // elements 0-3 | 16-19
	VPUNPCKHWD  Y6, Y4, Y1 // 4-7 | 20-23
	VPUNPCKLWD  Y7, Y5, Y2 // 8-11 | 24-27
	VPUNPCKHWD  Y7, Y5, Y3 // 12-15 | 28-31
	LEAQ        (DI)(AX*4), BX
	VPERM2I128  $0x20, Y1, Y0, Y4
	VMOVDQU     Y4, (BX)
	VPERM2I128  $0x20, Y3, Y2, Y4
	VMOVDQU     Y4, 32(BX)
	VPERM2I128  $0x31, Y1, Y0, Y4
	VMOVDQU     Y4, 64(BX)
	VPERM2I128  $0x31, Y3, Y2, Y4
	VMOVDQU     Y4, 96(BX)
	ADDQ        $32, AX
	CMPQ        AX, R8
	JLT         four
	VZEROUPPER
	RET
