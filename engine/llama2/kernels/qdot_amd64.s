//go:build amd64 && !purego

#include "textflag.h"

// AVX2 integer dot products of quantized weight rows with Q8_0 activation
// rows (qdot_amd64.go). Each block's 32 products are summed exactly in
// int32: the weights' absolute values (VPSIGNB) times the activations
// with the weights' signs (VPSIGNB) by VPMADDUBSW, whose pair sums are at
// most 2·128·127 and never saturate, then VPMADDWD by ones and a
// horizontal add. The float part is then what the Go code does, in the
// same order and rounding: sum += float32(isum) * (d_w * d_x), scalar.

DATA ones16<>+0(SB)/8, $0x0001000100010001
DATA ones16<>+8(SB)/8, $0x0001000100010001
DATA ones16<>+16(SB)/8, $0x0001000100010001
DATA ones16<>+24(SB)/8, $0x0001000100010001
GLOBL ones16<>(SB), RODATA|NOPTR, $32

DATA nib<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL nib<>(SB), RODATA|NOPTR, $32

DATA eight<>+0(SB)/8, $0x0808080808080808
DATA eight<>+8(SB)/8, $0x0808080808080808
DATA eight<>+16(SB)/8, $0x0808080808080808
DATA eight<>+24(SB)/8, $0x0808080808080808
GLOBL eight<>(SB), RODATA|NOPTR, $32

// BLOCKSUM leaves in AX the int32 sum of the products of the signed bytes
// in Y0 (weights) and Y1 (activations); Y15 holds int16 ones.
#define BLOCKSUM \
	VPSIGNB Y0, Y0, Y2 \
	VPSIGNB Y0, Y1, Y3 \
	VPMADDUBSW Y3, Y2, Y4 \
	VPMADDWD Y15, Y4, Y4 \
	VEXTRACTI128 $1, Y4, X5 \
	VPADDD X5, X4, X4 \
	VPSHUFD $0x4e, X4, X5 \
	VPADDD X5, X4, X4 \
	VPSHUFD $0xb1, X4, X5 \
	VPADDD X5, X4, X4 \
	VMOVD X4, AX

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
