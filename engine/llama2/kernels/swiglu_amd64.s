//go:build amd64 && !purego

#include "textflag.h"

// swigluAVX (swiglu_amd64.go) is swiglu eight elements at a time in AVX2,
// bit for bit: the very operations of expf and swiglu in their order, each
// rounded on its own (VMULPS then VADDPS, never FMA; VDIVPS for 1/(1+e)).
// A block of eight in which some -h is not in (expCutoff, 88] (or is NaN)
// ends the call, so the caller runs it in Go, where expf's branches live.

DATA swc<>+0(SB)/4, $0x80000000  // sign bit
DATA swc<>+4(SB)/4, $0xc28c0000  // expCutoff = -70
DATA swc<>+8(SB)/4, $0x42b00000  // 88: k = round(x·log2e) stays <= 127
DATA swc<>+12(SB)/4, $0x3fb8aa3b // log2e
DATA swc<>+16(SB)/4, $0x4b400000 // magic 1.5·2^23
DATA swc<>+20(SB)/4, $0x3f318000 // c1
DATA swc<>+24(SB)/4, $0xb95e8083 // c2
DATA swc<>+28(SB)/4, $0x3f800000 // 1
DATA swc<>+32(SB)/4, $0x4b3fff81 // magic's bits - 127: bits(t) - this = k + 127
DATA swc<>+36(SB)/4, $0x39506967 // p0
DATA swc<>+40(SB)/4, $0x3ab743ce // p1
DATA swc<>+44(SB)/4, $0x3c088908 // p2
DATA swc<>+48(SB)/4, $0x3d2aa9c1 // p3
DATA swc<>+52(SB)/4, $0x3e2aaaaa // p4
DATA swc<>+56(SB)/4, $0x3f000000 // p5
GLOBL swc<>(SB), RODATA|NOPTR, $60

// func swigluAVX(hp, gp *float32, n int) int
TEXT ·swigluAVX(SB), NOSPLIT, $0-32
	MOVQ hp+0(FP), SI
	MOVQ gp+8(FP), DI
	MOVQ n+16(FP), CX
	XORQ AX, AX
	LEAQ swc<>(SB), DX
	VBROADCASTSS 0(DX), Y15
	VBROADCASTSS 4(DX), Y14
	VBROADCASTSS 8(DX), Y13
	VBROADCASTSS 12(DX), Y12
	VBROADCASTSS 16(DX), Y11
	VBROADCASTSS 20(DX), Y10
	VBROADCASTSS 24(DX), Y9
	VBROADCASTSS 28(DX), Y8
	VBROADCASTSS 32(DX), Y7

loop:
	CMPQ CX, $8
	JLT  done
	VMOVUPS (SI)(AX*4), Y0       // v
	VXORPS  Y15, Y0, Y1          // x = -v
	VCMPPS  $0x1e, Y14, Y1, Y2   // x > cutoff (GT_OQ, false for NaN)
	VCMPPS  $0x12, Y13, Y1, Y3   // x <= 88 (LE_OQ)
	VANDPS  Y3, Y2, Y2
	VMOVMSKPS Y2, BX
	CMPL    BX, $0xff
	JNE     done
	VMULPS  Y12, Y1, Y2          // x·log2e
	VADDPS  Y11, Y2, Y2          // t = x·log2e + magic
	VSUBPS  Y11, Y2, Y3          // fk = t - magic
	VPSUBD  Y7, Y2, Y2           // k + 127
	VPSLLD  $23, Y2, Y2          // 2^k
	VMULPS  Y10, Y3, Y4          // fk·c1
	VSUBPS  Y4, Y1, Y4           // x - fk·c1
	VMULPS  Y9, Y3, Y3           // fk·c2
	VSUBPS  Y3, Y4, Y4           // r = x - fk·c1 - fk·c2
	VBROADCASTSS 36(DX), Y5      // p = p0
	VMULPS  Y4, Y5, Y5
	VBROADCASTSS 40(DX), Y6
	VADDPS  Y6, Y5, Y5           // p = p·r + p1
	VMULPS  Y4, Y5, Y5
	VBROADCASTSS 44(DX), Y6
	VADDPS  Y6, Y5, Y5
	VMULPS  Y4, Y5, Y5
	VBROADCASTSS 48(DX), Y6
	VADDPS  Y6, Y5, Y5
	VMULPS  Y4, Y5, Y5
	VBROADCASTSS 52(DX), Y6
	VADDPS  Y6, Y5, Y5
	VMULPS  Y4, Y5, Y5
	VBROADCASTSS 56(DX), Y6
	VADDPS  Y6, Y5, Y5           // p = p·r + p5
	VMULPS  Y4, Y5, Y5           // p·r
	VMULPS  Y4, Y5, Y5           // p·r·r
	VADDPS  Y4, Y5, Y5           // + r
	VADDPS  Y8, Y5, Y5           // + 1
	VMULPS  Y2, Y5, Y5           // e = p·2^k
	VADDPS  Y8, Y5, Y5           // 1 + e
	VDIVPS  Y5, Y8, Y5           // 1 / (1 + e)
	VMULPS  Y5, Y0, Y0           // v · (1/(1+e))
	VMOVUPS (DI)(AX*4), Y6
	VMULPS  Y6, Y0, Y0           // · g
	VMOVUPS Y0, (SI)(AX*4)
	ADDQ    $8, AX
	SUBQ    $8, CX
	JMP     loop

done:
	VZEROUPPER
	MOVQ AX, ret+24(FP)
	RET
