//go:build amd64 && !purego

#include "textflag.h"

// AVX2 integer dot products of quantized weight rows with Q8_0 activation
// rows (qdot_amd64.go). Each block's 32 products are summed exactly in
// int32: the weights' absolute values (VPSIGNB) times the activations
// with the weights' signs (VPSIGNB) by VPMADDUBSW, whose pair sums are at
// most 2·128·127 and never saturate, then VPMADDWD by ones and a
// horizontal add. The float part is then what the Go code does, in the
// same order and rounding: sum += float32(isum) * (d_w * d_x), scalar.

// CONST32 defines a 32-byte read-only constant of four copies of v.
#define CONST32(name, v) \
	DATA name+0(SB)/8, v \
	DATA name+8(SB)/8, v \
	DATA name+16(SB)/8, v \
	DATA name+24(SB)/8, v \
	GLOBL name(SB), RODATA|NOPTR, $32

CONST32(ones16<>, $0x0001000100010001)

CONST32(nib<>, $0x0f0f0f0f0f0f0f0f)

CONST32(eight<>, $0x0808080808080808)

// HSUM leaves in AX the sum of y's eight int32 lanes (x is y's low half;
// clobbers X5).
#define HSUM(y, x) \
	VEXTRACTI128 $1, y, X5 \
	VPADDD X5, x, x \
	VPSHUFD $0x4e, x, X5 \
	VPADDD X5, x, x \
	VPSHUFD $0xb1, x, X5 \
	VPADDD X5, x, x \
	VMOVD x, AX

// BLOCKSUM leaves in AX the int32 sum of the products of the signed bytes
// in Y0 (weights) and Y1 (activations); Y15 holds int16 ones.
#define BLOCKSUM \
	VPSIGNB Y0, Y0, Y2 \
	VPSIGNB Y0, Y1, Y3 \
	VPMADDUBSW Y3, Y2, Y4 \
	VPMADDWD Y15, Y4, Y4 \
	HSUM(Y4, X4)

// ACCUM adds float32(AX) * (half(DX) * d_x) to X8, d_x at off(DI).
#define ACCUM(off) \
	VMOVD DX, X6 \
	VCVTPH2PS X6, X6 \
	VMULSS off(DI), X6, X6 \
	VCVTSI2SSL AX, X7, X7 \
	VMULSS X6, X7, X7 \
	VADDSS X7, X8, X8

// func dotQ8_0AVX(w *byte, x *q8Block, nb int) float32
TEXT ·dotQ8_0AVX(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	VMOVDQU ones16<>(SB), Y15
	VXORPS X8, X8, X8
	TESTQ CX, CX
	JLE q8done
q8loop:
	VMOVDQU 2(SI), Y0
	VMOVDQU 4(DI), Y1
	BLOCKSUM
	MOVWLZX (SI), DX
	ACCUM(0)
	ADDQ $34, SI
	ADDQ $36, DI
	DECQ CX
	JNZ q8loop
q8done:
	VMOVSS X8, ret+24(FP)
	VZEROUPPER
	RET

// func dotQ4_0AVX(w *byte, x *q8Block, nb int) float32
TEXT ·dotQ4_0AVX(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ nb+16(FP), CX
	VMOVDQU ones16<>(SB), Y15
	VMOVDQU nib<>(SB), Y14
	VMOVDQU eight<>(SB), Y13
	VXORPS X8, X8, X8
	TESTQ CX, CX
	JLE q4done
q4loop:
	VMOVDQU 2(SI), X0
	VPSRLW $4, X0, X1
	VINSERTI128 $1, X1, Y0, Y0
	VPAND Y14, Y0, Y0
	VPSUBB Y13, Y0, Y0
	VMOVDQU 4(DI), Y1
	BLOCKSUM
	MOVWLZX (SI), DX
	ACCUM(0)
	ADDQ $18, SI
	ADDQ $36, DI
	DECQ CX
	JNZ q4loop
q4done:
	VMOVSS X8, ret+24(FP)
	VZEROUPPER
	RET

// SCALEDSUM adds to Y10 the products of the unsigned bytes in Y0 and the
// signed bytes at off(DI), pairs summed and times scale byte soff(BX).
#define SCALEDSUM(off, soff) \
	VMOVDQU off(DI), Y1 \
	VPMADDUBSW Y1, Y0, Y4 \
	MOVBLZX soff(BX), AX \
	VMOVD AX, X9 \
	VPBROADCASTW X9, Y9 \
	VPMADDWD Y9, Y4, Y4 \
	VPADDD Y4, Y10, Y10

// func q4KSumAVX(qs *byte, q8 *int8, sc *uint8) int32
// Σ_j sc[2j]·(qs[32j:][:32]&15 · q8[64j:][:32]) + sc[2j+1]·(qs[32j:][:32]>>4 ·
// q8[64j+32:][:32]) for j < 4. Nibbles are unsigned, so VPMADDUBSW takes
// them as they are (pairs at most 2·15·128); every sum fits int32.
TEXT ·q4KSumAVX(SB), NOSPLIT, $0-28
	MOVQ qs+0(FP), SI
	MOVQ q8+8(FP), DI
	MOVQ sc+16(FP), BX
	VMOVDQU nib<>(SB), Y14
	VPXOR Y10, Y10, Y10
	MOVQ $4, CX
q4kloop:
	VMOVDQU (SI), Y2
	VPAND Y14, Y2, Y0
	SCALEDSUM(0, 0)
	VPSRLW $4, Y2, Y0
	VPAND Y14, Y0, Y0
	SCALEDSUM(32, 1)
	ADDQ $32, SI
	ADDQ $64, DI
	ADDQ $2, BX
	DECQ CX
	JNZ q4kloop
	HSUM(Y10, X10)
	MOVL AX, ret+24(FP)
	VZEROUPPER
	RET

CONST32(bits45<>, $0x3030303030303030)

CONST32(b32<>, $0x2020202020202020)

// Q6PART adds to Y10 the products of the values v+32 (0..63, unsigned
// bytes in v) and the activations at off(DI), as (v+32)·y - 32·y pair sums
// times the int8 scales soff(BX) (lanes 0-15) and soff+1(BX) (16-31).
#define Q6PART(v, off, soff) \
	VMOVDQU off(DI), Y1 \
	VPMADDUBSW Y1, v, Y4 \
	VPMADDUBSW Y1, Y12, Y5 \
	VPSUBW Y5, Y4, Y4 \
	MOVBQSX soff(BX), AX \
	VMOVD AX, X9 \
	VPBROADCASTW X9, X9 \
	MOVBQSX soff+1(BX), AX \
	VMOVD AX, X11 \
	VPBROADCASTW X11, X11 \
	VINSERTI128 $1, X11, Y9, Y9 \
	VPMADDWD Y9, Y4, Y4 \
	VPADDD Y4, Y10, Y10

// func q6KSumAVX(blk *byte, q8 *int8) int32
// q6KSumGo for one 210-byte Q6_K block: low 4 bits at 0, high 2 bits at
// 128, int8 scales at 192.
TEXT ·q6KSumAVX(SB), NOSPLIT, $0-20
	MOVQ blk+0(FP), SI
	MOVQ q8+8(FP), DI
	LEAQ 128(SI), R8
	LEAQ 192(SI), BX
	VMOVDQU nib<>(SB), Y14
	VMOVDQU bits45<>(SB), Y13
	VMOVDQU b32<>(SB), Y12
	VPXOR Y10, Y10, Y10
	MOVQ $2, CX
q6kloop:
	VMOVDQU (SI), Y6
	VMOVDQU 32(SI), Y7
	VMOVDQU (R8), Y8
	VPAND Y14, Y6, Y0
	VPSLLW $4, Y8, Y2
	VPAND Y13, Y2, Y2
	VPOR Y2, Y0, Y0
	Q6PART(Y0, 0, 0)
	VPAND Y14, Y7, Y0
	VPSLLW $2, Y8, Y2
	VPAND Y13, Y2, Y2
	VPOR Y2, Y0, Y0
	Q6PART(Y0, 32, 2)
	VPSRLW $4, Y6, Y0
	VPAND Y14, Y0, Y0
	VPAND Y13, Y8, Y2
	VPOR Y2, Y0, Y0
	Q6PART(Y0, 64, 4)
	VPSRLW $4, Y7, Y0
	VPAND Y14, Y0, Y0
	VPSRLW $2, Y8, Y2
	VPAND Y13, Y2, Y2
	VPOR Y2, Y0, Y0
	Q6PART(Y0, 96, 6)
	ADDQ $64, SI
	ADDQ $32, R8
	ADDQ $128, DI
	ADDQ $8, BX
	DECQ CX
	JNZ q6kloop
	HSUM(Y10, X10)
	MOVL AX, ret+16(FP)
	VZEROUPPER
	RET
