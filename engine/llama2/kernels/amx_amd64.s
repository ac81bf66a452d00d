//go:build amd64 && !purego

#include "textflag.h"

// The AMX kernels for Q8_0 weights times Q8_0 activations (amx.go). Go's
// assembler has no AMX mnemonics: each tile instruction is written as its
// bytes, with the mnemonic (AT&T operand order) beside it, and uses the
// fixed registers named there. The loops are unrolled by hand: any change
// here must keep amx_test.go passing.
//
// Two sets of tiles (amxConfig) take alternate blocks: tmm0 and tmm4 the
// int32 sums, weight rows × activation rows; tmm1 and tmm5 the weight
// values, one 32-byte block per row; tmm2 and tmm6 the activation values;
// tmm3 and tmm7 the first four bytes of each weight row's block, whose low
// half is its F16 scale. Each set stores to its own buffer, and a block's
// float step runs while the next block's tiles are computed, so that its
// vector loads do not wait on the tile stores just made. Each loop also
// prefetches the next 16 weight rows, 1088 bytes (two blocks of 16 rows)
// at a time, so a decode streams the weights at memory speed.
//
// Frame: two buffers of 1152 bytes at 0(SP) and 1152(SP), each the 16×16
// int32 sums (16 of them, packed, in amxQ8_0x1), then the 16 weight
// blocks' first four bytes, then their scales as float32 (amxQ8_0 only).
//
// amxQ8_0 takes the activations packed (amxBlock: values 64 bytes per
// four, scales at 512); Z16–Z31 are the accumulators of weight rows 0–15,
// one lane per activation row. amxQ8_0x1 takes one activation row's
// q8Blocks as they are (the scale at 0, the values at 4, contiguous),
// gathers the weight scales (VPGATHERDD, masked to the configured rows)
// instead of using tmm3 and tmm7, and keeps its accumulator in Z16, one
// lane per weight row.

DATA amxRows<>+0(SB)/4, $0
DATA amxRows<>+4(SB)/4, $1
DATA amxRows<>+8(SB)/4, $2
DATA amxRows<>+12(SB)/4, $3
DATA amxRows<>+16(SB)/4, $4
DATA amxRows<>+20(SB)/4, $5
DATA amxRows<>+24(SB)/4, $6
DATA amxRows<>+28(SB)/4, $7
DATA amxRows<>+32(SB)/4, $8
DATA amxRows<>+36(SB)/4, $9
DATA amxRows<>+40(SB)/4, $10
DATA amxRows<>+44(SB)/4, $11
DATA amxRows<>+48(SB)/4, $12
DATA amxRows<>+52(SB)/4, $13
DATA amxRows<>+56(SB)/4, $14
DATA amxRows<>+60(SB)/4, $15
GLOBL amxRows<>(SB), RODATA|NOPTR, $64

// Block b's sums into buffer 0.
//	tileloadd (%rsi,%rdx,1),%tmm1
//	tileloadd (%rdi,%rcx,1),%tmm2
//	tilezero %tmm0
//	tdpbssd %tmm2,%tmm1,%tmm0
//	tileloadd -2(%rsi,%rdx,1),%tmm3
//	tilestored %tmm0,(%r8,%rcx,1)
//	tilestored %tmm3,(%r9,%r10,1)
#define AMX_TILES_0() \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x0c; BYTE $0x16; \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x14; BYTE $0x0f; \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc0; \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x6b; BYTE $0x5e; BYTE $0xc1; \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x5c; BYTE $0x16; BYTE $0xfe; \
	BYTE $0xc4; BYTE $0xc2; BYTE $0x7a; BYTE $0x4b; BYTE $0x04; BYTE $0x08; \
	BYTE $0xc4; BYTE $0x82; BYTE $0x7a; BYTE $0x4b; BYTE $0x1c; BYTE $0x11; \
	ADDQ $34, SI; \
	ADDQ $576, DI

// Block b's sums into buffer 1.
//	tileloadd (%rsi,%rdx,1),%tmm5
//	tileloadd (%rdi,%rcx,1),%tmm6
//	tilezero %tmm4
//	tdpbssd %tmm6,%tmm5,%tmm4
//	tileloadd -2(%rsi,%rdx,1),%tmm7
//	tilestored %tmm4,(%r13,%rcx,1)
//	tilestored %tmm7,(%r14,%r10,1)
#define AMX_TILES_1() \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x2c; BYTE $0x16; \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x34; BYTE $0x0f; \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xe0; \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x4b; BYTE $0x5e; BYTE $0xe5; \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x7c; BYTE $0x16; BYTE $0xfe; \
	BYTE $0xc4; BYTE $0xc2; BYTE $0x7a; BYTE $0x4b; BYTE $0x64; BYTE $0x0d; BYTE $0x00; \
	BYTE $0xc4; BYTE $0x82; BYTE $0x7a; BYTE $0x4b; BYTE $0x3c; BYTE $0x16; \
	ADDQ $34, SI; \
	ADDQ $576, DI

// Block b's sums into buffer 0.
//	tileloadd (%rsi,%rdx,1),%tmm1
//	tileloadd (%rdi,%r10,1),%tmm2
//	tilezero %tmm0
//	tdpbssd %tmm2,%tmm1,%tmm0
//	tilestored %tmm0,(%r8,%r10,1)
#define AMX_TILES_X1_0() \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x0c; BYTE $0x16; \
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x14; BYTE $0x17; \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc0; \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x6b; BYTE $0x5e; BYTE $0xc1; \
	BYTE $0xc4; BYTE $0x82; BYTE $0x7a; BYTE $0x4b; BYTE $0x04; BYTE $0x10; \
	ADDQ $34, SI; \
	ADDQ $36, DI

// Block b's sums into buffer 1.
//	tileloadd (%rsi,%rdx,1),%tmm5
//	tileloadd (%rdi,%r10,1),%tmm6
//	tilezero %tmm4
//	tdpbssd %tmm6,%tmm5,%tmm4
//	tilestored %tmm4,(%r13,%r10,1)
#define AMX_TILES_X1_1() \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x2c; BYTE $0x16; \
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x34; BYTE $0x17; \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xe0; \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x4b; BYTE $0x5e; BYTE $0xe5; \
	BYTE $0xc4; BYTE $0x82; BYTE $0x7a; BYTE $0x4b; BYTE $0x64; BYTE $0x15; BYTE $0x00; \
	ADDQ $34, SI; \
	ADDQ $36, DI

// The next 16 weight rows, two blocks' worth (1088 bytes) per loop.
#define AMX_PREFETCH() \
	PREFETCHT0 0(AX); \
	PREFETCHT0 64(AX); \
	PREFETCHT0 128(AX); \
	PREFETCHT0 192(AX); \
	PREFETCHT0 256(AX); \
	PREFETCHT0 320(AX); \
	PREFETCHT0 384(AX); \
	PREFETCHT0 448(AX); \
	PREFETCHT0 512(AX); \
	PREFETCHT0 576(AX); \
	PREFETCHT0 640(AX); \
	PREFETCHT0 704(AX); \
	PREFETCHT0 768(AX); \
	PREFETCHT0 832(AX); \
	PREFETCHT0 896(AX); \
	PREFETCHT0 960(AX); \
	PREFETCHT0 1024(AX); \
	ADDQ $1088, AX

// Block b-1's float step from buffer 0: the weight scales as float32,
// the activation scales, then weight row r's acc = acc + float32(s)·(dw[r]·dx).
#define AMX_FLOAT(c, sc) \
	VMOVDQU32 (sc), Z0; \
	VPMOVDW Z0, Y0; \
	VCVTPH2PS Y0, Z0; \
	VMOVUPS Z0, 64(sc); \
	VMOVUPS -640(DI), Z1; \
	VMULPS.BCST 64(sc), Z1, Z2; \
	VCVTDQ2PS 0(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z16, Z16; \
	VMULPS.BCST 68(sc), Z1, Z2; \
	VCVTDQ2PS 64(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z17, Z17; \
	VMULPS.BCST 72(sc), Z1, Z2; \
	VCVTDQ2PS 128(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z18, Z18; \
	VMULPS.BCST 76(sc), Z1, Z2; \
	VCVTDQ2PS 192(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z19, Z19; \
	VMULPS.BCST 80(sc), Z1, Z2; \
	VCVTDQ2PS 256(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z20, Z20; \
	VMULPS.BCST 84(sc), Z1, Z2; \
	VCVTDQ2PS 320(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z21, Z21; \
	VMULPS.BCST 88(sc), Z1, Z2; \
	VCVTDQ2PS 384(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z22, Z22; \
	VMULPS.BCST 92(sc), Z1, Z2; \
	VCVTDQ2PS 448(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z23, Z23; \
	VMULPS.BCST 96(sc), Z1, Z2; \
	VCVTDQ2PS 512(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z24, Z24; \
	VMULPS.BCST 100(sc), Z1, Z2; \
	VCVTDQ2PS 576(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z25, Z25; \
	VMULPS.BCST 104(sc), Z1, Z2; \
	VCVTDQ2PS 640(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z26, Z26; \
	VMULPS.BCST 108(sc), Z1, Z2; \
	VCVTDQ2PS 704(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z27, Z27; \
	VMULPS.BCST 112(sc), Z1, Z2; \
	VCVTDQ2PS 768(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z28, Z28; \
	VMULPS.BCST 116(sc), Z1, Z2; \
	VCVTDQ2PS 832(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z29, Z29; \
	VMULPS.BCST 120(sc), Z1, Z2; \
	VCVTDQ2PS 896(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z30, Z30; \
	VMULPS.BCST 124(sc), Z1, Z2; \
	VCVTDQ2PS 960(c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z31, Z31

// Block b-1's float step from buffer 0: the weight scales as float32,
// then acc = acc + float32(s)·(dw·dx), one lane per weight row.
#define AMX_FLOAT_X1(c) \
	VPXORD Z0, Z0, Z0; \
	KMOVW R9, K1; \
	VPGATHERDD -70(SI)(Z4*1), K1, Z0; \
	VPMOVDW Z0, Y0; \
	VCVTPH2PS Y0, Z0; \
	VMULPS.BCST -76(DI), Z0, Z2; \
	VCVTDQ2PS (c), Z3; \
	VMULPS Z2, Z3, Z3; \
	VADDPS Z3, Z16, Z16


// func amxQ8_0(cfg *amxConfig, w *byte, rb int, x *amxBlock, nb int, out *[16][16]float32)
TEXT ·amxQ8_0(SB), 0, $2304-48
	MOVQ cfg+0(FP), AX
	MOVQ w+8(FP), SI
	MOVQ rb+16(FP), DX
	MOVQ x+24(FP), DI
	MOVQ nb+32(FP), BX
	MOVQ out+40(FP), R11
	ADDQ $2, SI          // SI: the values of block b of weight row 0
	MOVQ $64, CX         // the stride of the sums and of the activations
	MOVQ $4, R10         // the stride of the scales
	MOVQ DX, R12
	SHLQ $4, R12
	LEAQ -2(SI)(R12*1), R12 // AX, after LDTILECFG: the next 16 weight rows
	LEAQ 0(SP), R8
	LEAQ 1024(SP), R9
	LEAQ 1152(SP), R13
	LEAQ 2176(SP), R14
	// Rows past the configured ones keep zero scales, so their (unused)
	// accumulators stay finite.
	VPXORD Z0, Z0, Z0
	VMOVDQU32 Z0, (R9)
	VMOVDQU32 Z0, (R14)
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

	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0x00                                              // ldtilecfg (%rax)

	MOVQ R12, AX
	AMX_TILES_0()

	DECQ BX
	JZ amxQ8_0_last0

amxQ8_0_loop:
	AMX_TILES_1()

	AMX_PREFETCH()

	AMX_FLOAT(R8, R9)

	DECQ BX
	JZ amxQ8_0_last1
	AMX_TILES_0()

	AMX_FLOAT(R13, R14)

	DECQ BX
	JNZ amxQ8_0_loop

amxQ8_0_last0:
	ADDQ $576, DI
	ADDQ $34, SI
	AMX_FLOAT(R8, R9)

	JMP amxQ8_0_done

amxQ8_0_last1:
	ADDQ $576, DI
	ADDQ $34, SI
	AMX_FLOAT(R13, R14)


amxQ8_0_done:
	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0xc0                                              // tilerelease

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

// func amxQ8_0x1(cfg *amxConfig, w *byte, rb int, x *q8Block, nb int, out *[16]float32)
TEXT ·amxQ8_0x1(SB), 0, $2304-48
	MOVQ cfg+0(FP), AX
	MOVQ w+8(FP), SI
	MOVQ rb+16(FP), DX
	MOVQ x+24(FP), DI
	MOVQ nb+32(FP), BX
	MOVQ out+40(FP), R11
	ADDQ $2, SI          // SI: the values of block b of weight row 0
	ADDQ $4, DI          // DI: the values of activation block b
	MOVQ $64, CX         // the stride of the sums and of the activations
	MOVQ $4, R10         // the stride of the scales
	MOVQ DX, R12
	SHLQ $4, R12
	LEAQ -2(SI)(R12*1), R12 // AX, after LDTILECFG: the next 16 weight rows
	LEAQ 0(SP), R8
	LEAQ 1024(SP), R9
	LEAQ 1152(SP), R13
	LEAQ 2176(SP), R14
	// Rows past the configured ones keep zero scales, so their (unused)
	// accumulators stay finite.
	VPXORD Z0, Z0, Z0
	VMOVDQU32 Z0, (R9)
	VMOVDQU32 Z0, (R14)
	VPXORD Z16, Z16, Z16
	// Z4: each weight row's offset, for the scales' gather; R9: the
	// gather's mask, the configured rows.
	VPBROADCASTD DX, Z4
	VPMULLD amxRows<>(SB), Z4, Z4
	MOVBLZX 48(AX), CX
	MOVL $1, R9
	SHLL CX, R9
	DECL R9
	MOVQ $64, CX

	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0x00                                              // ldtilecfg (%rax)

	MOVQ R12, AX
	AMX_TILES_X1_0()

	DECQ BX
	JZ amxQ8_0x1_last0

amxQ8_0x1_loop:
	AMX_TILES_X1_1()

	AMX_PREFETCH()

	AMX_FLOAT_X1(R8)

	DECQ BX
	JZ amxQ8_0x1_last1
	AMX_TILES_X1_0()

	AMX_FLOAT_X1(R13)

	DECQ BX
	JNZ amxQ8_0x1_loop

amxQ8_0x1_last0:
	ADDQ $36, DI
	ADDQ $34, SI
	AMX_FLOAT_X1(R8)

	JMP amxQ8_0x1_done

amxQ8_0x1_last1:
	ADDQ $36, DI
	ADDQ $34, SI
	AMX_FLOAT_X1(R13)


amxQ8_0x1_done:
	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0xc0                                              // tilerelease

	VMOVUPS Z16, 0(R11)

	VZEROUPPER
	RET
