//go:build amd64 && !purego

#include "textflag.h"

// AVX2+FMA pieces of attention (scores for 8-float heads, exp and weighted
// sums of values for any multiple of 8), used by attendHeadAVX and, for
// two query heads sharing a KV head, attendPairAVX (asm_amd64.go).
// Strides (kvDim) are in floats. Each function ends with VZEROUPPER.

// The reductions below are macros so that the one-head and the two-head
// kernels run the very same instructions for each head's result.

// HADD4 reduces the products a, b, c, d of four rows by two VHADDPS
// levels: in dst, the low 128 bits hold each row's (l0+l1)+(l2+l3) and
// the high 128 bits its (l4+l5)+(l6+l7). Clobbers a and c.
#define HADD4(a, b, c, d, dst) \
	VHADDPS b, a, a \
	VHADDPS d, c, c \
	VHADDPS c, a, dst

// SCORES8 finishes eight scores from the HADD4 of rows 0..3 (lo) and 4..7
// (hi): adds the halves, scales them, stores them at (ptr) and folds them
// into the running maximum max. Clobbers t1 and t2.
#define SCORES8(lo, hi, t1, t2, scale, ptr, max) \
	VPERM2F128 $0x20, hi, lo, t1 \
	VPERM2F128 $0x31, hi, lo, t2 \
	VADDPS  t2, t1, t1 \
	VMULPS  scale, t1, t1 \
	VMOVUPS t1, (ptr) \
	VMAXPS  t1, max, max

// HMAX leaves in the low lane of xmax the maximum of the eight lanes of
// ymax (whose low half is xmax). Clobbers X1.
#define HMAX(ymax, xmax) \
	VEXTRACTF128 $1, ymax, X1 \
	VMAXPS    X1, xmax, xmax \
	VPERMILPS $0x4E, xmax, X1 \
	VMAXPS    X1, xmax, xmax \
	VPERMILPS $0xB1, xmax, X1 \
	VMAXPS    X1, xmax, xmax

// SUM4STORE stores (a+b)+(c+d), times the float32 inv, at out (a pointer
// argument). Clobbers a, c, Y4 and DI.
#define SUM4STORE(a, b, c, d, inv, out) \
	VADDPS b, a, a \
	VADDPS d, c, c \
	VADDPS c, a, a \
	VBROADCASTSS inv, Y4 \
	VMULPS Y4, a, a \
	MOVQ out, DI \
	VMOVUPS a, (DI)

// func scores8x8(k *float32, kvDim int, n8 int, q *float32, scale float32, att *float32) float32
// att[p] = scale·(q·k[p*kvDim:][:8]) for p < n8 (a multiple of 8, > 0),
// eight positions at a time: eight products reduced lane-wise by two
// VHADDPS levels and a 128-bit swap, so position p's score is
// ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)) of q*k. Returns the maximum score.
TEXT ·scores8x8(SB), NOSPLIT, $0-52
	MOVQ k+0(FP), SI
	MOVQ kvDim+8(FP), BX
	SHLQ $2, BX
	MOVQ n8+16(FP), CX
	SHRQ $3, CX
	MOVQ q+24(FP), AX
	VMOVUPS (AX), Y15
	VBROADCASTSS scale+32(FP), Y14
	MOVQ att+40(FP), DI
	MOVL $0xff800000, AX // -Inf
	MOVL AX, X13
	VBROADCASTSS X13, Y13
	LEAQ (BX)(BX*2), DX // 3 rows
	LEAQ (BX)(BX*4), R8 // 5 rows
	LEAQ (DX)(DX*1), R9 // 6 rows
	LEAQ (R9)(BX*1), R10 // 7 rows

loop:
	VMULPS  (SI), Y15, Y0
	VMULPS  (SI)(BX*1), Y15, Y1
	VMULPS  (SI)(BX*2), Y15, Y2
	VMULPS  (SI)(DX*1), Y15, Y3
	VMULPS  (SI)(BX*4), Y15, Y4
	VMULPS  (SI)(R8*1), Y15, Y5
	VMULPS  (SI)(R9*1), Y15, Y6
	VMULPS  (SI)(R10*1), Y15, Y7
	HADD4(Y0, Y1, Y2, Y3, Y0)
	HADD4(Y4, Y5, Y6, Y7, Y4)
	SCORES8(Y0, Y4, Y1, Y2, Y14, DI, Y13)
	LEAQ    (SI)(BX*8), SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     loop

	HMAX(Y13, X13)
	VZEROUPPER
	MOVSS X13, ret+48(FP)
	RET

// Constants of expVec (Cephes expf, as kernels.expf).
DATA expconst<>+0(SB)/4, $-70.0          // cutoff (expCutoff)
DATA expconst<>+4(SB)/4, $88.37626       // hi
DATA expconst<>+8(SB)/4, $1.44269504088896341 // log2e
DATA expconst<>+12(SB)/4, $-0.693359375  // -c1
DATA expconst<>+16(SB)/4, $2.12194440e-4 // -c2
DATA expconst<>+20(SB)/4, $1.9875691500e-4
DATA expconst<>+24(SB)/4, $1.3981999507e-3
DATA expconst<>+28(SB)/4, $8.3334519073e-3
DATA expconst<>+32(SB)/4, $4.1665795894e-2
DATA expconst<>+36(SB)/4, $1.6666665459e-1
DATA expconst<>+40(SB)/4, $5.0000001201e-1
DATA expconst<>+44(SB)/4, $1.0
DATA expconst<>+48(SB)/4, $127
GLOBL expconst<>(SB), RODATA|NOPTR, $52

// func expVec(att *float32, n8 int, m float32) float32
// att[p] = exp(att[p]-m) for p < n8 (a multiple of 8, > 0), 0 below
// e^-70, eight at a time; returns the sum of the results (lane sums,
// reduced as in the dot tiles).
TEXT ·expVec(SB), NOSPLIT, $0-28
	MOVQ att+0(FP), DI
	MOVQ n8+8(FP), CX
	SHRQ $3, CX
	VBROADCASTSS m+16(FP), Y15
	LEAQ expconst<>(SB), AX
	VBROADCASTSS 0(AX), Y14  // cutoff
	VBROADCASTSS 4(AX), Y13  // hi
	VBROADCASTSS 8(AX), Y12  // log2e
	VBROADCASTSS 12(AX), Y11 // -c1
	VBROADCASTSS 16(AX), Y10 // -c2
	VBROADCASTSS 44(AX), Y9  // 1
	VBROADCASTSS 48(AX), Y8  // int32 127
	VBROADCASTSS 20(AX), Y6  // p0
	VXORPS Y7, Y7, Y7        // sum

loop:
	VMOVUPS (DI), Y0
	VSUBPS  Y15, Y0, Y0         // x = att - m
	VCMPPS  $0x1e, Y14, Y0, Y1  // keep = x > cutoff (GT_OQ)
	VMAXPS  Y14, Y0, Y0
	VMINPS  Y13, Y0, Y0
	VMULPS  Y12, Y0, Y2
	VROUNDPS $0, Y2, Y2         // fk = round(x·log2e), to even
	VFMADD231PS Y11, Y2, Y0     // r = fk·(-c1) + x
	VFMADD231PS Y10, Y2, Y0     // r = fk·(-c2) + r
	VMOVAPS Y6, Y3
	VBROADCASTSS 24(AX), Y4
	VFMADD213PS Y4, Y0, Y3      // y = y·r + p1
	VBROADCASTSS 28(AX), Y4
	VFMADD213PS Y4, Y0, Y3
	VBROADCASTSS 32(AX), Y4
	VFMADD213PS Y4, Y0, Y3
	VBROADCASTSS 36(AX), Y4
	VFMADD213PS Y4, Y0, Y3
	VBROADCASTSS 40(AX), Y4
	VFMADD213PS Y4, Y0, Y3
	VMULPS  Y0, Y3, Y3          // y·r
	VFMADD213PS Y0, Y0, Y3      // y·r·r + r
	VADDPS  Y9, Y3, Y3          // + 1
	VCVTPS2DQ Y2, Y5
	VPADDD  Y8, Y5, Y5
	VPSLLD  $23, Y5, Y5         // 2^fk
	VMULPS  Y5, Y3, Y3
	VANDPS  Y1, Y3, Y3
	VMOVUPS Y3, (DI)
	VADDPS  Y3, Y7, Y7
	ADDQ    $32, DI
	DECQ    CX
	JNZ     loop

	VMOVAPS Y7, Y1
	VHADDPS Y1, Y7, Y7
	VHADDPS Y7, Y7, Y7
	VEXTRACTF128 $1, Y7, X1
	VADDPS X1, X7, X7
	VZEROUPPER
	MOVSS X7, ret+24(FP)
	RET

// func weightedVec(v *float32, kvDim int, att *float32, n int, inv float32, out *float32)
// out[:8] = inv·Σ_p att[p]·v[p*kvDim:][:8] for p < n (n > 0), with four
// accumulators (positions p ≡ 0..3 mod 4 while four remain, the rest in
// the first) summed as (o0+o1)+(o2+o3).
TEXT ·weightedVec(SB), NOSPLIT, $0-48
	MOVQ v+0(FP), SI
	MOVQ kvDim+8(FP), BX
	SHLQ $2, BX
	MOVQ att+16(FP), DI
	MOVQ n+24(FP), CX
	LEAQ (BX)(BX*2), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ CX, R8
	SHRQ $2, R8
	JZ   tail

loop4:
	VBROADCASTSS 0(DI), Y4
	VBROADCASTSS 4(DI), Y5
	VBROADCASTSS 8(DI), Y6
	VBROADCASTSS 12(DI), Y7
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS (SI)(BX*1), Y5, Y1
	VFMADD231PS (SI)(BX*2), Y6, Y2
	VFMADD231PS (SI)(DX*1), Y7, Y3
	LEAQ (SI)(BX*4), SI
	ADDQ $16, DI
	DECQ R8
	JNZ  loop4

tail:
	ANDQ $3, CX
	JZ   done

loop1:
	VBROADCASTSS 0(DI), Y4
	VFMADD231PS (SI), Y4, Y0
	ADDQ BX, SI
	ADDQ $4, DI
	DECQ CX
	JNZ  loop1

done:
	SUM4STORE(Y0, Y1, Y2, Y3, inv+32(FP), out+40(FP))
	VZEROUPPER
	RET

// Grouped-query attention: two query heads that share a KV head read each
// key and value row once. Each head's results are bit for bit those of
// scores8x8 and weightedVec (same products, same reduction order).

// func scores8x8x2(k *float32, kvDim int, n8 int, q *float32, scale float32, att *float32, ldatt int) (m0, m1 float32)
// As scores8x8 for the two 8-float queries q[0:8] (scores to att) and
// q[8:16] (scores to att[ldatt:]): each key row is loaded once and
// multiplied with both. Returns each head's maximum score.
TEXT ·scores8x8x2(SB), NOSPLIT, $0-64
	MOVQ k+0(FP), SI
	MOVQ kvDim+8(FP), BX
	SHLQ $2, BX
	MOVQ n8+16(FP), CX
	SHRQ $3, CX
	MOVQ q+24(FP), AX
	VMOVUPS (AX), Y15    // q0
	VMOVUPS 32(AX), Y14  // q1
	VBROADCASTSS scale+32(FP), Y13
	MOVQ att+40(FP), DI
	MOVQ ldatt+48(FP), R11
	LEAQ (DI)(R11*4), R11
	MOVL $0xff800000, AX // -Inf
	MOVL AX, X12
	VBROADCASTSS X12, Y12 // max0
	VMOVAPS Y12, Y11      // max1
	LEAQ (BX)(BX*2), DX  // 3 rows
	LEAQ (BX)(BX*4), R8  // 5 rows
	LEAQ (DX)(DX*1), R9  // 6 rows
	LEAQ (R9)(BX*1), R10 // 7 rows

loop:
	// Rows 0..3: products with q0 in Y0..Y3, with q1 in Y4..Y7, reduced
	// to the half-sums of rows 0..3 in Y8 (q0) and Y9 (q1).
	VMOVUPS (SI), Y10
	VMULPS  Y10, Y15, Y0
	VMULPS  Y10, Y14, Y4
	VMOVUPS (SI)(BX*1), Y10
	VMULPS  Y10, Y15, Y1
	VMULPS  Y10, Y14, Y5
	VMOVUPS (SI)(BX*2), Y10
	VMULPS  Y10, Y15, Y2
	VMULPS  Y10, Y14, Y6
	VMOVUPS (SI)(DX*1), Y10
	VMULPS  Y10, Y15, Y3
	VMULPS  Y10, Y14, Y7
	HADD4(Y0, Y1, Y2, Y3, Y8)
	HADD4(Y4, Y5, Y6, Y7, Y9)

	// Rows 4..7, reduced into Y0 (q0) and Y4 (q1).
	VMOVUPS (SI)(BX*4), Y10
	VMULPS  Y10, Y15, Y0
	VMULPS  Y10, Y14, Y4
	VMOVUPS (SI)(R8*1), Y10
	VMULPS  Y10, Y15, Y1
	VMULPS  Y10, Y14, Y5
	VMOVUPS (SI)(R9*1), Y10
	VMULPS  Y10, Y15, Y2
	VMULPS  Y10, Y14, Y6
	VMOVUPS (SI)(R10*1), Y10
	VMULPS  Y10, Y15, Y3
	VMULPS  Y10, Y14, Y7
	HADD4(Y0, Y1, Y2, Y3, Y0)
	HADD4(Y4, Y5, Y6, Y7, Y4)

	SCORES8(Y8, Y0, Y1, Y2, Y13, DI, Y12)  // head 0
	SCORES8(Y9, Y4, Y5, Y6, Y13, R11, Y11) // head 1

	LEAQ    (SI)(BX*8), SI
	ADDQ    $32, DI
	ADDQ    $32, R11
	DECQ    CX
	JNZ     loop

	HMAX(Y12, X12)
	HMAX(Y11, X11)
	VZEROUPPER
	MOVSS X12, m0+56(FP)
	MOVSS X11, m1+60(FP)
	RET

// func weightedVec2(v *float32, kvDim int, att0, att1 *float32, n int, inv0, inv1 float32, out0, out1 *float32)
// As weightedVec for two heads' weights over the same value rows: each
// 8-float row is loaded once and accumulated into both heads' four
// accumulators (Y0..Y3 for att0, Y8..Y11 for att1).
TEXT ·weightedVec2(SB), NOSPLIT, $0-64
	MOVQ v+0(FP), SI
	MOVQ kvDim+8(FP), BX
	SHLQ $2, BX
	MOVQ att0+16(FP), DI
	MOVQ att1+24(FP), R9
	MOVQ n+32(FP), CX
	LEAQ (BX)(BX*2), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	MOVQ CX, R8
	SHRQ $2, R8
	JZ   tail

loop4:
	VMOVUPS (SI), Y12
	VBROADCASTSS 0(DI), Y13
	VBROADCASTSS 0(R9), Y14
	VFMADD231PS Y12, Y13, Y0
	VFMADD231PS Y12, Y14, Y8
	VMOVUPS (SI)(BX*1), Y12
	VBROADCASTSS 4(DI), Y13
	VBROADCASTSS 4(R9), Y14
	VFMADD231PS Y12, Y13, Y1
	VFMADD231PS Y12, Y14, Y9
	VMOVUPS (SI)(BX*2), Y12
	VBROADCASTSS 8(DI), Y13
	VBROADCASTSS 8(R9), Y14
	VFMADD231PS Y12, Y13, Y2
	VFMADD231PS Y12, Y14, Y10
	VMOVUPS (SI)(DX*1), Y12
	VBROADCASTSS 12(DI), Y13
	VBROADCASTSS 12(R9), Y14
	VFMADD231PS Y12, Y13, Y3
	VFMADD231PS Y12, Y14, Y11
	LEAQ (SI)(BX*4), SI
	ADDQ $16, DI
	ADDQ $16, R9
	DECQ R8
	JNZ  loop4

tail:
	ANDQ $3, CX
	JZ   done

loop1:
	VMOVUPS (SI), Y12
	VBROADCASTSS 0(DI), Y13
	VBROADCASTSS 0(R9), Y14
	VFMADD231PS Y12, Y13, Y0
	VFMADD231PS Y12, Y14, Y8
	ADDQ BX, SI
	ADDQ $4, DI
	ADDQ $4, R9
	DECQ CX
	JNZ  loop1

done:
	SUM4STORE(Y0, Y1, Y2, Y3, inv0+40(FP), out0+48(FP))
	SUM4STORE(Y8, Y9, Y10, Y11, inv1+44(FP), out1+56(FP))
	VZEROUPPER
	RET
