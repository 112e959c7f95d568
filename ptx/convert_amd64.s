//go:build !purego

#include "textflag.h"

// func convertAVX2(k rowKind, dst, src unsafe.Pointer, n int)
// Eight elements per step: widen to 32-bit integers, convert to float32
// (exact for 8- and 16-bit integers) and store, or round to bfloat16 to
// nearest even (bits + 0x7fff + bit 16, shifted down 16) and store the
// high halves.
TEXT ·convertAVX2(SB), NOSPLIT, $0-32
	MOVBQZX k+0(FP), AX
	MOVQ    dst+8(FP), DI
	MOVQ    src+16(FP), SI
	MOVQ    n+24(FP), CX
	VPCMPEQD Y14, Y14, Y14
	VPSRLD   $17, Y14, Y15   // 0x7fff in every lane
	VPSRLD   $31, Y14, Y14   // 1 in every lane
	CMPQ    AX, $0
	JEQ     u8f32
	CMPQ    AX, $1
	JEQ     u16f32
	CMPQ    AX, $2
	JEQ     i16f32
	CMPQ    AX, $3
	JEQ     u8bf16
	CMPQ    AX, $4
	JEQ     u16bf16
	JMP     i16bf16

u8f32:
	VPMOVZXBD (SI), Y0
	VCVTDQ2PS Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $8, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JNZ       u8f32
	VZEROUPPER
	RET

u16f32:
	VPMOVZXWD (SI), Y0
	VCVTDQ2PS Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JNZ       u16f32
	VZEROUPPER
	RET

i16f32:
	VPMOVSXWD (SI), Y0
	VCVTDQ2PS Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JNZ       i16f32
	VZEROUPPER
	RET

u8bf16:
	VPMOVZXBD (SI), Y0
	ADDQ      $8, SI
	JMP       bf16

u16bf16:
	VPMOVZXWD (SI), Y0
	ADDQ      $16, SI
	JMP       bf16

i16bf16:
	VPMOVSXWD (SI), Y0
	ADDQ      $16, SI

bf16:
	VCVTDQ2PS    Y0, Y0
	VPSRLD       $16, Y0, Y1
	VPAND        Y14, Y1, Y1
	VPADDD       Y15, Y0, Y0
	VPADDD       Y1, Y0, Y0
	VPSRLD       $16, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPACKUSDW    X1, X0, X0
	VMOVDQU      X0, (DI)
	ADDQ         $16, DI
	SUBQ         $8, CX
	JZ           done
	CMPQ         AX, $3
	JEQ          u8bf16
	CMPQ         AX, $4
	JEQ          u16bf16
	JMP          i16bf16

done:
	VZEROUPPER
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET
