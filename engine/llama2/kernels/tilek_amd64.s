//go:build amd64 && !purego

#include "textflag.h"

// The AVX-512 VNNI tiles of Q4_K and Q6_K weights times Q8_K activations for
// prompts (tilek.go): four weight rows against four pairs of activation
// rows, one 256-value block at a time. A ZMM register holds group g of a
// block of two activation rows, one per 256-bit half, and the weight
// row's group g (32 nibbles) in both halves: VPMADDUBSW sums the products
// in pairs (|2·15·128| fits a word) and VPDPWSSD adds them times the
// group's scale into sixteen int32 lanes per (weight row, pair), exactly.
// After the eight groups, a transposed reduction sums each half's eight
// lanes into out's order (4·row + weight row), the mins times the group
// sums are summed the same way, and dotQ4K's float step follows on
// sixteen results at once, so each result is the same bits as dotQ4K.

DATA knib<>+0(SB)/4, $0x0f0f0f0f
GLOBL knib<>(SB), RODATA|NOPTR, $4

// KNIB loads the 32 bytes of values at off(w) into both halves: their low
// nibbles (group 2j) in Z17, their high ones (group 2j+1) in Z18.
#define KNIB(w, off) \
	VBROADCASTI64X4 off(w), Z17 \
	VPSRLW $4, Z17, Z18 \
	VPANDD Z16, Z17, Z17 \
	VPANDD Z16, Z18, Z18

// KMAC adds to acc groups 2j and 2j+1 of the pair at p (at off(p) and
// off+64(p)) times Z17 and Z18, each pair sum times its scale (the
// dwords at sc(SI) and sc+4(SI)); clobbers Z19, Z20.
#define KMAC(p, off, sc, acc) \
	VPMADDUBSW off(p), Z17, Z19 \
	VPDPWSSD.BCST sc(SI), Z19, acc \
	VPMADDUBSW 64+off(p), Z18, Z20 \
	VPDPWSSD.BCST 4+sc(SI), Z20, acc

// KROW runs groups 2j and 2j+1 of weight row i (at w) against the four
// pairs, into a0..a3.
#define KROW(w, i, j, a0, a1, a2, a3) \
	KNIB(w, 16+32*j) \
	KMAC(DI, 128*j, 32*i+8*j, a0) \
	KMAC(R8, 128*j, 32*i+8*j, a1) \
	KMAC(R9, 128*j, 32*i+8*j, a2) \
	KMAC(R10, 128*j, 32*i+8*j, a3)

// KGROUPS runs groups 2j and 2j+1 of the four weight rows.
#define KGROUPS(j) \
	KROW(AX, 0, j, Z0, Z1, Z2, Z3) \
	KROW(BX, 1, j, Z4, Z5, Z6, Z7) \
	KROW(CX, 2, j, Z8, Z9, Z10, Z11) \
	KROW(DX, 3, j, Z12, Z13, Z14, Z15)

// RED1 and RED2 reduce by 128-bit lanes: RED1 leaves in a, per lane,
// [a0+a2, b0+b2, a1+a3, b1+b3]; RED2 then leaves, from RED1's results of
// rows 0,1 (a) and 2,3 (b), the four rows' sums of the lane's four
// dwords. RED3 adds the two 128-bit lanes of each half of a and of b:
// [a's low half, a's high, b's low, b's high]. Clobber Z19, Z20.
#define RED1(a, b) \
	VPUNPCKLDQ b, a, Z19 \
	VPUNPCKHDQ b, a, Z20 \
	VPADDD Z20, Z19, a

#define RED2(a, b) \
	VPUNPCKLQDQ b, a, Z19 \
	VPUNPCKHQDQ b, a, Z20 \
	VPADDD Z20, Z19, a

#define RED3(a, b, dst) \
	VSHUFI32X4 $0x88, b, a, Z19 \
	VSHUFI32X4 $0xdd, b, a, Z20 \
	VPADDD Z20, Z19, dst

// KMIN leaves in m the mins of the four weight rows (Z23-Z26) times the
// group sums of the pairs at p and q, summed, in out's order; clobbers
// Z27-Z30.
#define KMIN(p, q, m) \
	VMOVDQU64 512(p), Y27 \
	VINSERTI64X4 $1, 512(q), Z27, Z27 \
	VPMADDWD Z27, Z23, m \
	VPMADDWD Z27, Z24, Z28 \
	VPMADDWD Z27, Z25, Z29 \
	VPMADDWD Z27, Z26, Z30 \
	RED1(m, Z28) \
	RED1(Z29, Z30) \
	RED2(m, Z29)

// KSTEP adds to sum dotQ4K's block term for the pairs at p and q, from
// the integer sums is and ms: d·isum - dmin·msum, with d and dmin the
// weight rows' (Z12, Z13) times the rows' activation scales; clobbers
// Z14, Z15.
#define KSTEP(p, q, is, ms, sum) \
	VMOVUPS 544(p), Y14 \
	VINSERTF64X4 $1, 544(q), Z14, Z14 \
	VMULPS Z14, Z12, Z15 \
	VMULPS Z14, Z13, Z14 \
	VCVTDQ2PS is, is \
	VCVTDQ2PS ms, ms \
	VMULPS Z15, is, is \
	VMULPS Z14, ms, ms \
	VSUBPS ms, is, is \
	VADDPS is, sum, sum

// func dotQ4Kt4VNNI(w0, w1, w2, w3 *byte, meta *q4KMeta, x0, x1, x2, x3 *q8Kx2, nb int, out *[32]float32)
TEXT ·dotQ4Kt4VNNI(SB), NOSPLIT, $0-88
	MOVQ w0+0(FP), AX
	MOVQ w1+8(FP), BX
	MOVQ w2+16(FP), CX
	MOVQ w3+24(FP), DX
	MOVQ meta+32(FP), SI
	MOVQ x0+40(FP), DI
	MOVQ x1+48(FP), R8
	MOVQ x2+56(FP), R9
	MOVQ x3+64(FP), R10
	MOVQ nb+72(FP), R11
	VPBROADCASTD knib<>(SB), Z16
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22

loop:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	KGROUPS(0)
	KGROUPS(1)
	KGROUPS(2)
	KGROUPS(3)

	// acc[i][p] is Z(4i+p): weight rows 0,1 and 2,3, then all four.
	RED1(Z0, Z4)
	RED1(Z1, Z5)
	RED1(Z2, Z6)
	RED1(Z3, Z7)
	RED1(Z8, Z12)
	RED1(Z9, Z13)
	RED1(Z10, Z14)
	RED1(Z11, Z15)
	RED2(Z0, Z8)
	RED2(Z1, Z9)
	RED2(Z2, Z10)
	RED2(Z3, Z11)
	RED3(Z0, Z1, Z0)
	RED3(Z2, Z3, Z2)

	VBROADCASTI32X4 128(SI), Z23
	VBROADCASTI32X4 144(SI), Z24
	VBROADCASTI32X4 160(SI), Z25
	VBROADCASTI32X4 176(SI), Z26
	KMIN(DI, R8, Z4)
	KMIN(R9, R10, Z8)

	VBROADCASTF32X4 192(SI), Z12
	VBROADCASTF32X4 208(SI), Z13
	KSTEP(DI, R8, Z0, Z4, Z21)
	KSTEP(R9, R10, Z2, Z8, Z22)

	ADDQ $144, AX
	ADDQ $144, BX
	ADDQ $144, CX
	ADDQ $144, DX
	ADDQ $224, SI
	ADDQ $640, DI
	ADDQ $640, R8
	ADDQ $640, R9
	ADDQ $640, R10
	DECQ R11
	JNZ loop

	MOVQ out+80(FP), AX
	VMOVUPS Z21, (AX)
	VMOVUPS Z22, 64(AX)
	VZEROUPPER
	RET

// The Q6_K tile works as the Q4_K one, on chunks of 32 values (two groups
// of 16, with their own scales in each half's low and high four lanes)
// made unsigned by adding 32: VPDPWSSD adds -32·scale·(the group's sum of
// x) to the lanes too, so each half's lanes still sum to exactly dotQ6K's
// integer block sum (|the sum| < 2^31 at every step).

DATA k6hi<>+0(SB)/4, $0x30303030
GLOBL k6hi<>(SB), RODATA|NOPTR, $4

// k6idx, for chunk c, picks the scales of groups 2c and 2c+1 for the low
// and high four dwords of each 256-bit half.
#define K6IDX(c, a, b) \
	DATA k6idx<>+(64*c)(SB)/8, $(a | a<<32) \
	DATA k6idx<>+(64*c+8)(SB)/8, $(a | a<<32) \
	DATA k6idx<>+(64*c+16)(SB)/8, $(b | b<<32) \
	DATA k6idx<>+(64*c+24)(SB)/8, $(b | b<<32) \
	DATA k6idx<>+(64*c+32)(SB)/8, $(a | a<<32) \
	DATA k6idx<>+(64*c+40)(SB)/8, $(a | a<<32) \
	DATA k6idx<>+(64*c+48)(SB)/8, $(b | b<<32) \
	DATA k6idx<>+(64*c+56)(SB)/8, $(b | b<<32)

K6IDX(0, 0, 1)
K6IDX(1, 2, 3)
K6IDX(2, 4, 5)
K6IDX(3, 6, 7)
K6IDX(4, 8, 9)
K6IDX(5, 10, 11)
K6IDX(6, 12, 13)
K6IDX(7, 14, 15)
GLOBL k6idx<>(SB), RODATA|NOPTR, $512

// K6MAC adds chunk c of the four pairs times the unsigned weights in Z26,
// the pair sums times the scales in Z27, to a0..a3; clobbers Z19, Z20.
#define K6MAC(c, a0, a1, a2, a3) \
	VPMADDUBSW (64*c)(DI), Z26, Z19 \
	VPDPWSSD Z27, Z19, a0 \
	VPMADDUBSW (64*c)(R8), Z26, Z20 \
	VPDPWSSD Z27, Z20, a1 \
	VPMADDUBSW (64*c)(R9), Z26, Z19 \
	VPDPWSSD Z27, Z19, a2 \
	VPMADDUBSW (64*c)(R10), Z26, Z20 \
	VPDPWSSD Z27, Z20, a3

// K6SC leaves in Z27 weight row i's scales for chunk c.
#define K6SC(i, c) \
	VMOVDQU32 k6idx<>+(64*c)(SB), Z18 \
	VPERMD (64*i)(SI), Z18, Z27

// K6HALF runs values 128n to 128n+127 (chunks c0-c3) of weight row i
// (at w) against the four pairs: ql's low nibbles, then its high ones, each with two bits of
// qh above; Z16 = 0x0f bytes, Z17 = 0x30 bytes; clobbers Z23-Z28.
#define K6HALF(w, i, n, c0, c1, c2, c3, a0, a1, a2, a3) \
	VBROADCASTI64X4 (64*n)(w), Z23 \
	VBROADCASTI64X4 (64*n+32)(w), Z24 \
	VBROADCASTI64X4 (128+32*n)(w), Z25 \
	VPSLLW $4, Z25, Z28 \
	VPANDD Z17, Z28, Z28 \
	VPANDD Z16, Z23, Z26 \
	VPORD Z28, Z26, Z26 \
	K6SC(i, c0) \
	K6MAC(c0, a0, a1, a2, a3) \
	VPSLLW $2, Z25, Z28 \
	VPANDD Z17, Z28, Z28 \
	VPANDD Z16, Z24, Z26 \
	VPORD Z28, Z26, Z26 \
	K6SC(i, c1) \
	K6MAC(c1, a0, a1, a2, a3) \
	VPANDD Z17, Z25, Z28 \
	VPSRLW $4, Z23, Z26 \
	VPANDD Z16, Z26, Z26 \
	VPORD Z28, Z26, Z26 \
	K6SC(i, c2) \
	K6MAC(c2, a0, a1, a2, a3) \
	VPSRLW $2, Z25, Z28 \
	VPANDD Z17, Z28, Z28 \
	VPSRLW $4, Z24, Z26 \
	VPANDD Z16, Z26, Z26 \
	VPORD Z28, Z26, Z26 \
	K6SC(i, c3) \
	K6MAC(c3, a0, a1, a2, a3)

// K6ROW runs weight row i's block, then adds -32·scale·(the sums of 16)
// of the four pairs.
#define K6ROW(w, i, a0, a1, a2, a3) \
	K6HALF(w, i, 0, 0, 1, 2, 3, a0, a1, a2, a3) \
	K6HALF(w, i, 1, 4, 5, 6, 7, a0, a1, a2, a3) \
	VBROADCASTI64X4 (256+32*i)(SI), Z27 \
	VPDPWSSD 576(DI), Z27, a0 \
	VPDPWSSD 576(R8), Z27, a1 \
	VPDPWSSD 576(R9), Z27, a2 \
	VPDPWSSD 576(R10), Z27, a3

// K6STEP adds to sum dotQ6K's block term for the pairs at p and q from
// their integer sums is: (d_w·d_x)·isum, d_w in Z12; clobbers Z14, Z15.
#define K6STEP(p, q, is, sum) \
	VMOVUPS 544(p), Y14 \
	VINSERTF64X4 $1, 544(q), Z14, Z14 \
	VMULPS Z14, Z12, Z15 \
	VCVTDQ2PS is, is \
	VMULPS is, Z15, is \
	VADDPS is, sum, sum

// func dotQ6Kt4VNNI(w0, w1, w2, w3 *byte, meta *q6KMeta, x0, x1, x2, x3 *q8Kx2, nb int, out *[32]float32)
TEXT ·dotQ6Kt4VNNI(SB), NOSPLIT, $0-88
	MOVQ w0+0(FP), AX
	MOVQ w1+8(FP), BX
	MOVQ w2+16(FP), CX
	MOVQ w3+24(FP), DX
	MOVQ meta+32(FP), SI
	MOVQ x0+40(FP), DI
	MOVQ x1+48(FP), R8
	MOVQ x2+56(FP), R9
	MOVQ x3+64(FP), R10
	MOVQ nb+72(FP), R11
	VPBROADCASTD knib<>(SB), Z16
	VPBROADCASTD k6hi<>(SB), Z17
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22

loop6:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	K6ROW(AX, 0, Z0, Z1, Z2, Z3)
	K6ROW(BX, 1, Z4, Z5, Z6, Z7)
	K6ROW(CX, 2, Z8, Z9, Z10, Z11)
	K6ROW(DX, 3, Z12, Z13, Z14, Z15)

	RED1(Z0, Z4)
	RED1(Z1, Z5)
	RED1(Z2, Z6)
	RED1(Z3, Z7)
	RED1(Z8, Z12)
	RED1(Z9, Z13)
	RED1(Z10, Z14)
	RED1(Z11, Z15)
	RED2(Z0, Z8)
	RED2(Z1, Z9)
	RED2(Z2, Z10)
	RED2(Z3, Z11)
	RED3(Z0, Z1, Z0)
	RED3(Z2, Z3, Z2)

	VBROADCASTF32X4 384(SI), Z12
	K6STEP(DI, R8, Z0, Z21)
	K6STEP(R9, R10, Z2, Z22)

	ADDQ $210, AX
	ADDQ $210, BX
	ADDQ $210, CX
	ADDQ $210, DX
	ADDQ $400, SI
	ADDQ $640, DI
	ADDQ $640, R8
	ADDQ $640, R9
	ADDQ $640, R10
	DECQ R11
	JNZ loop6

	MOVQ out+80(FP), AX
	VMOVUPS Z21, (AX)
	VMOVUPS Z22, 64(AX)
	VZEROUPPER
	RET
