//go:build amd64 && !purego

#include "textflag.h"

// The AVX-512 VNNI tile of Q8_0 weights times Q8_0 activations for prompts
// (tile_amd64.go): four weight rows against four pairs of activation rows,
// in the order of dotQ8_0 (quant.go), so each result is the same bits as
// the one-row kernels give. A ZMM register holds block b of two activation
// rows, one per 256-bit half, and the weight row's block b in both halves,
// so each half is exactly the eight int32 lanes and eight float
// accumulators of one (weight row, activation row) product.
//
// VPDPBUSD multiplies unsigned by signed bytes: the weights are made
// unsigned by adding 128 (w XOR 0x80), and the activations' q8x2 carries
// each lane's -128·(sum of its four values), the lane's start value, so a
// lane ends at exactly Σ w·x (|Σ(w+128)·x| ≤ 4·255·127, no overflow).

DATA signbit<>+0(SB)/4, $0x80808080
GLOBL signbit<>(SB), RODATA|NOPTR, $4

DATA nib4<>+0(SB)/4, $0x0f0f0f0f
GLOBL nib4<>(SB), RODATA|NOPTR, $4

DATA fifth<>+0(SB)/4, $0x10101010
GLOBL fifth<>(SB), RODATA|NOPTR, $4

// tsel and tbit pick Q5_0's fifth bits, as bytesel and bitsel do in
// qdot_amd64.s.
DATA tsel<>+0(SB)/8, $0x0000000000000000
DATA tsel<>+8(SB)/8, $0x0101010101010101
DATA tsel<>+16(SB)/8, $0x0202020202020202
DATA tsel<>+24(SB)/8, $0x0303030303030303
GLOBL tsel<>(SB), RODATA|NOPTR, $32

DATA tbit<>+0(SB)/8, $0x7fbfdfeff7fbfdfe
GLOBL tbit<>(SB), RODATA|NOPTR, $8

// TLOAD8, TLOAD4 and TLOAD5 load weight row r's block (at r) for every
// pair: u = its values made unsigned (Q8_0: plus 128; Q4_0: the nibbles,
// the value plus 8; Q5_0: the five bits, the value plus 16) in both
// halves, dw = its scale in all sixteen lanes. Z12 = signbit bytes (Q8_0)
// or nib4 bytes; Z10 = fifth bytes, Y11 = tsel, Y14 = all ones, Y15 =
// tbit (Q5_0); clobber Y13.
#define TLOAD8(r, u, dw) \
	VBROADCASTI64X4 2(r), u \
	VPXORD Z12, u, u \
	TSCALE(r, dw)

#define TSCALE(r, dw) \
	VPBROADCASTW (r), Y13 \
	VCVTPH2PS Y13, dw

// TNIB leaves in u's low half the 32 nibbles of the 16 bytes at off(r)
// (low nibbles first), in both halves.
#define TNIB(r, off, u, y, x) \
	VMOVDQU off(r), x \
	VPSRLW $4, x, X13 \
	VINSERTI128 $1, X13, y, y \
	VPANDD Z12, u, u

#define TLOAD4(r, u, dw, y, x) \
	TNIB(r, 2, u, y, x) \
	VINSERTI64X4 $1, y, u, u \
	TSCALE(r, dw)

// A set fifth bit i gives byte i of the broadcast qh, ORed with every bit
// but bit i%8, all ones.
#define TLOAD5(r, u, dw, y, x) \
	TNIB(r, 6, u, y, x) \
	VPBROADCASTD 2(r), Y13 \
	VPSHUFB Y11, Y13, Y13 \
	VPOR Y15, Y13, Y13 \
	VPCMPEQB Y14, Y13, Y13 \
	VPAND Y10, Y13, Y13 \
	VPOR Y13, y, y \
	VINSERTI64X4 $1, y, u, u \
	TSCALE(r, dw)

// TPAIR adds to acc the lanes of weight block u (scale dw) times the
// activation pair at p, each scaled by d_w·d_x; clobbers Z8, Z9.
#define TPAIR(p, u, dw, acc) \
	VMOVDQU32 64(p), Z8 \
	VPDPBUSD (p), u, Z8 \
	VCVTDQ2PS Z8, Z8 \
	VMULPS 128(p), dw, Z9 \
	VMULPS Z9, Z8, Z8 \
	VADDPS Z8, acc, acc

// TROW runs the four weight rows against the pair at p.
#define TROW(p, a0, a1, a2, a3) \
	TPAIR(p, Z0, Z4, a0) \
	TPAIR(p, Z1, Z5, a1) \
	TPAIR(p, Z2, Z6, a2) \
	TPAIR(p, Z3, Z7, a3)

// THSUM stores at off(AX) hsum8 of Y0's eight floats; clobbers X0, X1.
#define THSUM(off) \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS X1, X0, X0 \
	VMOVHLPS X0, X0, X1 \
	VADDPS X1, X0, X0 \
	VMOVSHDUP X0, X1 \
	VADDSS X1, X0, X0 \
	VMOVSS X0, off(AX)

// TOUT stores the two products in acc: the low half's at lo(AX), the high
// half's at hi(AX).
#define TOUT(acc, lo, hi) \
	VMOVAPS acc, Z0 \
	THSUM(lo) \
	VEXTRACTF64X4 $1, acc, Y0 \
	THSUM(hi)

// TILE is the body of a tile kernel with weight loader load (for
// TLOAD8, whose x and y are unused) and block size bs: the arguments of
// dotQ8_0t4VNNI, out[4·row + weight row], rows 2p and 2p+1 from pair p.
#define TILE(load, bs) \
	MOVQ w0+0(FP), SI \
	MOVQ w1+8(FP), R8 \
	MOVQ w2+16(FP), R9 \
	MOVQ w3+24(FP), R10 \
	MOVQ x0+32(FP), DI \
	MOVQ x1+40(FP), BX \
	MOVQ x2+48(FP), DX \
	MOVQ x3+56(FP), R11 \
	MOVQ nb+64(FP), CX \
	VPXORD Z16, Z16, Z16 \
	VPXORD Z17, Z17, Z17 \
	VPXORD Z18, Z18, Z18 \
	VPXORD Z19, Z19, Z19 \
	VPXORD Z20, Z20, Z20 \
	VPXORD Z21, Z21, Z21 \
	VPXORD Z22, Z22, Z22 \
	VPXORD Z23, Z23, Z23 \
	VPXORD Z24, Z24, Z24 \
	VPXORD Z25, Z25, Z25 \
	VPXORD Z26, Z26, Z26 \
	VPXORD Z27, Z27, Z27 \
	VPXORD Z28, Z28, Z28 \
	VPXORD Z29, Z29, Z29 \
	VPXORD Z30, Z30, Z30 \
	VPXORD Z31, Z31, Z31 \
	TESTQ CX, CX \
	JLE done \
loop: \
	load(SI, Z0, Z4, Y0, X0) \
	load(R8, Z1, Z5, Y1, X1) \
	load(R9, Z2, Z6, Y2, X2) \
	load(R10, Z3, Z7, Y3, X3) \
	TROW(DI, Z16, Z17, Z18, Z19) \
	TROW(BX, Z20, Z21, Z22, Z23) \
	TROW(DX, Z24, Z25, Z26, Z27) \
	TROW(R11, Z28, Z29, Z30, Z31) \
	ADDQ $bs, SI \
	ADDQ $bs, R8 \
	ADDQ $bs, R9 \
	ADDQ $bs, R10 \
	ADDQ $192, DI \
	ADDQ $192, BX \
	ADDQ $192, DX \
	ADDQ $192, R11 \
	DECQ CX \
	JNZ loop \
done: \
	MOVQ out+72(FP), AX \
	TOUT(Z16, 0, 16) \
	TOUT(Z17, 4, 20) \
	TOUT(Z18, 8, 24) \
	TOUT(Z19, 12, 28) \
	TOUT(Z20, 32, 48) \
	TOUT(Z21, 36, 52) \
	TOUT(Z22, 40, 56) \
	TOUT(Z23, 44, 60) \
	TOUT(Z24, 64, 80) \
	TOUT(Z25, 68, 84) \
	TOUT(Z26, 72, 88) \
	TOUT(Z27, 76, 92) \
	TOUT(Z28, 96, 112) \
	TOUT(Z29, 100, 116) \
	TOUT(Z30, 104, 120) \
	TOUT(Z31, 108, 124) \
	VZEROUPPER \
	RET

#define TLOAD8X(r, u, dw, y, x) TLOAD8(r, u, dw)

// func dotQ8_0t4VNNI(w0, w1, w2, w3 *byte, x0, x1, x2, x3 *q8x2, nb int, out *[32]float32)
TEXT ·dotQ8_0t4VNNI(SB), NOSPLIT, $0-80
	VPBROADCASTD signbit<>(SB), Z12
	TILE(TLOAD8X, 34)

// func dotQ4_0t4VNNI(w0, w1, w2, w3 *byte, x0, x1, x2, x3 *q8x2, nb int, out *[32]float32)
TEXT ·dotQ4_0t4VNNI(SB), NOSPLIT, $0-80
	VPBROADCASTD nib4<>(SB), Z12
	TILE(TLOAD4, 18)

// func dotQ5_0t4VNNI(w0, w1, w2, w3 *byte, x0, x1, x2, x3 *q8x2, nb int, out *[32]float32)
TEXT ·dotQ5_0t4VNNI(SB), NOSPLIT, $0-80
	VPBROADCASTD nib4<>(SB), Z12
	VPBROADCASTD fifth<>(SB), Z10
	VMOVDQU tsel<>(SB), Y11
	VPCMPEQB Y14, Y14, Y14
	VPBROADCASTQ tbit<>(SB), Y15
	TILE(TLOAD5, 22)
