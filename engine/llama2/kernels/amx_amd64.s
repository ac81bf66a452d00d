//go:build amd64 && !purego

#include "textflag.h"

// AMX kernel for Q8_0 weights times Q8_0 activations (amx.go). Go's
// assembler has no AMX mnemonics: each tile instruction is written as its
// bytes, with the mnemonic (AT&T operand order) beside it, and uses the
// fixed registers named there.
//
// Tiles (amxConfig): tmm0 the int32 sums, weight rows × activation rows;
// tmm1 the weight values, one 32-byte block per row; tmm2 the activation
// values (amxBlock.qs); tmm3 the first four bytes of each weight row's
// block, whose low half is its F16 scale.

// func amxQ8_0(cfg *amxConfig, w *byte, rb int, x *amxBlock, nb int, out *[16][16]float32)
//
// Frame: 0(SP) the 16×16 int32 sums, 1024(SP) the 16 weight blocks'
// first four bytes, 1088(SP) their scales as float32. Z16–Z31 are the
// accumulators of weight rows 0–15, one lane per activation row.
TEXT ·amxQ8_0(SB), 0, $1152-48
	MOVQ cfg+0(FP), AX
	MOVQ w+8(FP), SI
	MOVQ rb+16(FP), DX
	MOVQ x+24(FP), DI
	MOVQ nb+32(FP), BX
	MOVQ out+40(FP), R11
	ADDQ $2, SI          // SI: the values of the current block of weight row 0
	MOVQ $64, CX         // the stride of the sums and of the activations
	MOVQ $4, R10         // the stride of the scales
	LEAQ 0(SP), R8
	LEAQ 1024(SP), R9
	LEAQ 1088(SP), R12
	// Rows past the configured ones keep zero scales, so their (unused)
	// accumulators stay finite.
	VPXORD Z0, Z0, Z0
	VMOVDQU32 Z0, (R9)
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31

	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0x00 // ldtilecfg (%rax)

loop:
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x0c; BYTE $0x16               // tileloadd (%rsi,%rdx,1),%tmm1
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x14; BYTE $0x0f               // tileloadd (%rdi,%rcx,1),%tmm2
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc0                           // tilezero %tmm0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x6b; BYTE $0x5e; BYTE $0xc1                           // tdpbssd %tmm2,%tmm1,%tmm0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x5c; BYTE $0x16; BYTE $0xfe   // tileloadd -2(%rsi,%rdx,1),%tmm3
	BYTE $0xc4; BYTE $0xc2; BYTE $0x7a; BYTE $0x4b; BYTE $0x04; BYTE $0x08               // tilestored %tmm0,(%r8,%rcx,1)
	BYTE $0xc4; BYTE $0x82; BYTE $0x7a; BYTE $0x4b; BYTE $0x1c; BYTE $0x11               // tilestored %tmm3,(%r9,%r10,1)

	// The 16 weight scales as float32, and the activation scales.
	VMOVDQU32 (R9), Z0
	VPMOVDW Z0, Y0
	VCVTPH2PS Y0, Z0
	VMOVUPS Z0, (R12)
	VMOVUPS 512(DI), Z1

	// Weight row r: acc = acc + float32(s)·(dw[r]·dx), lane by lane.
	VMULPS.BCST 0(R12), Z1, Z2
	VCVTDQ2PS 0(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z16, Z16
	VMULPS.BCST 4(R12), Z1, Z2
	VCVTDQ2PS 64(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z17, Z17
	VMULPS.BCST 8(R12), Z1, Z2
	VCVTDQ2PS 128(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z18, Z18
	VMULPS.BCST 12(R12), Z1, Z2
	VCVTDQ2PS 192(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z19, Z19
	VMULPS.BCST 16(R12), Z1, Z2
	VCVTDQ2PS 256(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z20, Z20
	VMULPS.BCST 20(R12), Z1, Z2
	VCVTDQ2PS 320(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z21, Z21
	VMULPS.BCST 24(R12), Z1, Z2
	VCVTDQ2PS 384(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z22, Z22
	VMULPS.BCST 28(R12), Z1, Z2
	VCVTDQ2PS 448(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z23, Z23
	VMULPS.BCST 32(R12), Z1, Z2
	VCVTDQ2PS 512(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z24, Z24
	VMULPS.BCST 36(R12), Z1, Z2
	VCVTDQ2PS 576(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z25, Z25
	VMULPS.BCST 40(R12), Z1, Z2
	VCVTDQ2PS 640(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z26, Z26
	VMULPS.BCST 44(R12), Z1, Z2
	VCVTDQ2PS 704(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z27, Z27
	VMULPS.BCST 48(R12), Z1, Z2
	VCVTDQ2PS 768(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z28, Z28
	VMULPS.BCST 52(R12), Z1, Z2
	VCVTDQ2PS 832(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z29, Z29
	VMULPS.BCST 56(R12), Z1, Z2
	VCVTDQ2PS 896(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z30, Z30
	VMULPS.BCST 60(R12), Z1, Z2
	VCVTDQ2PS 960(R8), Z3
	VMULPS Z2, Z3, Z3
	VADDPS Z3, Z31, Z31

	ADDQ $34, SI
	ADDQ $576, DI
	DECQ BX
	JNZ loop

	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0xc0 // tilerelease
	VMOVUPS Z16, 0(R11)
	VMOVUPS Z17, 64(R11)
	VMOVUPS Z18, 128(R11)
	VMOVUPS Z19, 192(R11)
	VMOVUPS Z20, 256(R11)
	VMOVUPS Z21, 320(R11)
	VMOVUPS Z22, 384(R11)
	VMOVUPS Z23, 448(R11)
	VMOVUPS Z24, 512(R11)
	VMOVUPS Z25, 576(R11)
	VMOVUPS Z26, 640(R11)
	VMOVUPS Z27, 704(R11)
	VMOVUPS Z28, 768(R11)
	VMOVUPS Z29, 832(R11)
	VMOVUPS Z30, 896(R11)
	VMOVUPS Z31, 960(R11)

	VZEROUPPER
	RET
