//go:build amd64 && !purego

#include "textflag.h"

// AVX2 dot products of quantized weight rows (Q8_0, Q4_0, Q5_0) with
// Q8_0 activation rows (qdot_amd64.go), in the Go code's order (laneSums,
// hsum8 in quant.go), so the results are the same bits. Each block's 32
// products are summed exactly in eight int32 lanes of four consecutive
// values: the weights' absolute values (VPSIGNB) times the activations
// with the weights' signs (VPSIGNB) by VPMADDUBSW, whose pair sums are at
// most 2·128·127 and never saturate, then VPMADDWD by ones. The lanes are
// converted to float (exact: |lane| < 2^24), multiplied by the block's
// scale d_w·d_x and added to eight float accumulators, one vector per
// weight row; the accumulators are summed at the end of the row. The x4
// forms run four weight rows (stride bytes apart) against one activation
// row, so each activation block is loaded once for four rows.

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

// Q5_0's fifth bits to bytes: byte i of the broadcast 32 bits is byte
// i/8 of qh (bytesel), ORed with every bit but bit i%8 (bitsel); it is all
// ones exactly when qh's bit i is set.
DATA bytesel<>+0(SB)/8, $0x0000000000000000
DATA bytesel<>+8(SB)/8, $0x0101010101010101
DATA bytesel<>+16(SB)/8, $0x0202020202020202
DATA bytesel<>+24(SB)/8, $0x0303030303030303
GLOBL bytesel<>(SB), RODATA|NOPTR, $32

CONST32(bitsel<>, $0x7fbfdfeff7fbfdfe)

CONST32(hi4<>, $0xf0f0f0f0f0f0f0f0)

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

// HSUMF leaves in x's low float hsum8 of y's eight float lanes (x is y's
// low half; clobbers X0).
#define HSUMF(y, x) \
	VEXTRACTF128 $1, y, X0 \
	VADDPS X0, x, x \
	VMOVHLPS x, x, X0 \
	VADDPS X0, x, x \
	VMOVSHDUP x, X0 \
	VADDSS X0, x, x

// W8_0, W4_0 and W5_0 load the 32 weights of the block at r as signed
// bytes into Y0 (value j in byte j), clobbering Y2. W4_0 needs Y14 = nib,
// Y13 = eight; W5_0 Y14 = nib, Y12 = bytesel, Y10 = all ones, Y9 = hi4.
#define W8_0(r) \
	VMOVDQU 2(r), Y0

#define W4_0(r) \
	VMOVDQU 2(r), X0 \
	VPSRLW $4, X0, X2 \
	VINSERTI128 $1, X2, Y0, Y0 \
	VPAND Y14, Y0, Y0 \
	VPSUBB Y13, Y0, Y0

// A clear fifth bit makes the value nibble|0xf0 = nibble-16.
#define W5_0(r) \
	VMOVDQU 6(r), X0 \
	VPSRLW $4, X0, X2 \
	VINSERTI128 $1, X2, Y0, Y0 \
	VPAND Y14, Y0, Y0 \
	VPBROADCASTD 2(r), Y2 \
	VPSHUFB Y12, Y2, Y2 \
	VPOR bitsel<>(SB), Y2, Y2 \
	VPCMPEQB Y10, Y2, Y2 \
	VPANDN Y9, Y2, Y2 \
	VPOR Y2, Y0, Y0

// LANES adds to acc the block's lanes for the weights in Y0 and the
// activations in Y1, times half(0(r))·d_x (d_x in every lane of Y11);
// Y15 = int16 ones; clobbers Y2-Y4.
#define LANES(r, acc) \
	VPSIGNB Y0, Y0, Y2 \
	VPSIGNB Y0, Y1, Y3 \
	VPMADDUBSW Y3, Y2, Y2 \
	VPMADDWD Y15, Y2, Y2 \
	VCVTDQ2PS Y2, Y2 \
	VPBROADCASTW (r), X4 \
	VCVTPH2PS X4, Y4 \
	VMULPS Y11, Y4, Y4 \
	VMULPS Y4, Y2, Y2 \
	VADDPS Y2, acc, acc

// ROW1 is the body of a one-row dot product with weight loader load and
// block size bs: w at w+0(FP), x at x+8(FP), nb at nb+16(FP), result at
// ret+24(FP).
#define ROW1(load, bs) \
	MOVQ w+0(FP), SI \
	MOVQ x+8(FP), DI \
	MOVQ nb+16(FP), CX \
	VXORPS Y8, Y8, Y8 \
	TESTQ CX, CX \
	JLE done \
loop: \
	VMOVDQU 4(DI), Y1 \
	VBROADCASTSS (DI), Y11 \
	load(SI) \
	LANES(SI, Y8) \
	ADDQ $bs, SI \
	ADDQ $36, DI \
	DECQ CX \
	JNZ loop \
done: \
	HSUMF(Y8, X8) \
	VMOVSS X8, ret+24(FP) \
	VZEROUPPER \
	RET

// ROW4 is the body of a four-row dot product: rows at w+0(FP) and
// stride+8(FP) bytes apart, x at x+16(FP), nb at nb+24(FP), the four
// results to out+32(FP).
#define ROW4(load, bs) \
	MOVQ w+0(FP), SI \
	MOVQ stride+8(FP), R8 \
	MOVQ x+16(FP), DI \
	MOVQ nb+24(FP), CX \
	LEAQ (SI)(R8*1), R10 \
	LEAQ (SI)(R8*2), R11 \
	LEAQ (R10)(R8*2), R12 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
	VXORPS Y8, Y8, Y8 \
	TESTQ CX, CX \
	JLE done \
loop: \
	VMOVDQU 4(DI), Y1 \
	VBROADCASTSS (DI), Y11 \
	PREFETCHT0 PF(SI) \
	PREFETCHT0 PF(R10) \
	PREFETCHT0 PF(R11) \
	PREFETCHT0 PF(R12) \
	load(SI) \
	LANES(SI, Y5) \
	load(R10) \
	LANES(R10, Y6) \
	load(R11) \
	LANES(R11, Y7) \
	load(R12) \
	LANES(R12, Y8) \
	ADDQ $bs, SI \
	ADDQ $bs, R10 \
	ADDQ $bs, R11 \
	ADDQ $bs, R12 \
	ADDQ $36, DI \
	DECQ CX \
	JNZ loop \
done: \
	MOVQ out+32(FP), DX \
	HSUMF(Y5, X5) \
	VMOVSS X5, (DX) \
	HSUMF(Y6, X6) \
	VMOVSS X6, 4(DX) \
	HSUMF(Y7, X7) \
	VMOVSS X7, 8(DX) \
	HSUMF(Y8, X8) \
	VMOVSS X8, 12(DX) \
	VZEROUPPER \
	RET

// KROW1 is the body of a one-row K-quant dot product with block macro
// block and block size bs: w at w+0(FP), x at x+8(FP), nb at nb+16(FP),
// the sum built in ret+24(FP).
#define KROW1(block, bs) \
	MOVQ w+0(FP), SI \
	MOVQ x+8(FP), DI \
	MOVQ nb+16(FP), CX \
	MOVL $0, ret+24(FP) \
	TESTQ CX, CX \
	JLE done \
loop: \
	block(SI, ret+24(FP)) \
	ADDQ $bs, SI \
	ADDQ $324, DI \
	DECQ CX \
	JNZ loop \
done: \
	VZEROUPPER \
	RET

// KROW4 is the body of a four-row K-quant dot product: rows at w+0(FP)
// and stride+8(FP) bytes apart, x at x+16(FP), nb at nb+24(FP), the four
// sums built in out+32(FP).
#define KROW4(block, bs) \
	MOVQ w+0(FP), SI \
	MOVQ stride+8(FP), R8 \
	MOVQ x+16(FP), DI \
	MOVQ nb+24(FP), CX \
	MOVQ out+32(FP), R13 \
	LEAQ (SI)(R8*1), R10 \
	LEAQ (SI)(R8*2), R11 \
	LEAQ (R10)(R8*2), R12 \
	MOVQ $0, (R13) \
	MOVQ $0, 8(R13) \
	TESTQ CX, CX \
	JLE done \
loop: \
	block(SI, 0(R13)) \
	block(R10, 4(R13)) \
	block(R11, 8(R13)) \
	block(R12, 12(R13)) \
	ADDQ $bs, SI \
	ADDQ $bs, R10 \
	ADDQ $bs, R11 \
	ADDQ $bs, R12 \
	ADDQ $324, DI \
	DECQ CX \
	JNZ loop \
done: \
	VZEROUPPER \
	RET

// HSUMT is HSUM with the temporary t in place of X5.
#define HSUMT(y, x, t) \
	VEXTRACTI128 $1, y, t \
	VPADDD t, x, x \
	VPSHUFD $0x4e, x, t \
	VPADDD t, x, x \
	VPSHUFD $0xb1, x, t \
	VPADDD t, x, x \
	VMOVD x, AX

// Q4KXROW adds to the float at acc the Q4_K block unpacked by dotQ4Kr4AVX
// (nibbles of group g in Yg, mins in Y8, scales broadcast at 32g(SP),
// half(d) in X13, half(dmin) in X15) times the Q8_K block at p, in
// Q4KBLOCK's order.
#define Q4KXROW(p, acc) \
	VMOVDQU 260(p), Y9 \
	VPHADDD 292(p), Y9, Y9 \
	VPERMQ $0xd8, Y9, Y9 \
	VPMULLD Y8, Y9, Y9 \
	HSUMT(Y9, X9, X11) \
	VCVTSI2SSL AX, X12, X12 \
	VPMADDUBSW 4(p), Y0, Y10 \
	VPMADDWD 0(SP), Y10, Y10 \
	VPMADDUBSW 36(p), Y1, Y9 \
	VPMADDWD 32(SP), Y9, Y9 \
	VPADDD Y9, Y10, Y10 \
	VPMADDUBSW 68(p), Y2, Y9 \
	VPMADDWD 64(SP), Y9, Y9 \
	VPADDD Y9, Y10, Y10 \
	VPMADDUBSW 100(p), Y3, Y9 \
	VPMADDWD 96(SP), Y9, Y9 \
	VPADDD Y9, Y10, Y10 \
	VPMADDUBSW 132(p), Y4, Y9 \
	VPMADDWD 128(SP), Y9, Y9 \
	VPADDD Y9, Y10, Y10 \
	VPMADDUBSW 164(p), Y5, Y9 \
	VPMADDWD 160(SP), Y9, Y9 \
	VPADDD Y9, Y10, Y10 \
	VPMADDUBSW 196(p), Y6, Y9 \
	VPMADDWD 192(SP), Y9, Y9 \
	VPADDD Y9, Y10, Y10 \
	VPMADDUBSW 228(p), Y7, Y9 \
	VPMADDWD 224(SP), Y9, Y9 \
	VPADDD Y9, Y10, Y10 \
	HSUMT(Y10, X10, X11) \
	VCVTSI2SSL AX, X10, X10 \
	VMULSS (p), X13, X9 \
	VMULSS (p), X15, X11 \
	VMULSS X10, X9, X9 \
	VMULSS X12, X11, X11 \
	VSUBSS X11, X9, X9 \
	VMOVSS acc, X11 \
	VADDSS X9, X11, X11 \
	VMOVSS X11, acc

// Q4KSCALE broadcasts R9's low byte to the int16 lanes at off(SP) and
// moves R9 on to the next scale.
#define Q4KSCALE(off) \
	MOVBLZX R9, AX \
	VMOVD AX, X9 \
	VPBROADCASTW X9, Y9 \
	VMOVDQU Y9, off(SP) \
	SHRQ $8, R9

// PF is how far ahead of each row the x4 loops prefetch.
#define PF 2048

#define Q4CONSTS \
	VMOVDQU ones16<>(SB), Y15 \
	VMOVDQU nib<>(SB), Y14 \
	VMOVDQU eight<>(SB), Y13

#define Q5CONSTS \
	VMOVDQU ones16<>(SB), Y15 \
	VMOVDQU nib<>(SB), Y14 \
	VMOVDQU bytesel<>(SB), Y12 \
	VPCMPEQB Y10, Y10, Y10 \
	VMOVDQU hi4<>(SB), Y9

// func dotQ8_0AVX(w *byte, x *q8Block, nb int) float32
TEXT ·dotQ8_0AVX(SB), NOSPLIT, $0-28
	VMOVDQU ones16<>(SB), Y15
	ROW1(W8_0, 34)

// func dotQ8_0x4AVX(w *byte, stride int, x *q8Block, nb int, out *[4]float32)
TEXT ·dotQ8_0x4AVX(SB), NOSPLIT, $0-40
	VMOVDQU ones16<>(SB), Y15
	ROW4(W8_0, 34)

// func dotQ4_0AVX(w *byte, x *q8Block, nb int) float32
TEXT ·dotQ4_0AVX(SB), NOSPLIT, $0-28
	Q4CONSTS
	ROW1(W4_0, 18)

// func dotQ4_0x4AVX(w *byte, stride int, x *q8Block, nb int, out *[4]float32)
TEXT ·dotQ4_0x4AVX(SB), NOSPLIT, $0-40
	Q4CONSTS
	ROW4(W4_0, 18)

// func dotQ5_0AVX(w *byte, x *q8Block, nb int) float32
TEXT ·dotQ5_0AVX(SB), NOSPLIT, $0-28
	Q5CONSTS
	ROW1(W5_0, 22)

// func dotQ5_0x4AVX(w *byte, stride int, x *q8Block, nb int, out *[4]float32)
TEXT ·dotQ5_0x4AVX(SB), NOSPLIT, $0-40
	Q5CONSTS
	ROW4(W5_0, 22)

// PFK is how far ahead the K-quant dot products prefetch: a few blocks
// on, in the same row or the next (rows are contiguous).
#define PFK 1024

// Q6_K's high bits land in bits 4 and 5 (bits45); b32 is its offset 32.
CONST32(bits45<>, $0x3030303030303030)

CONST32(b32<>, $0x2020202020202020)

// Whole-row K-quant dot products: Q4_K or Q6_K weight rows times a Q8_K
// activation row (324-byte blocks: float32 d, 256 int8 values, 16 int32
// sums of 16), in dotQ4K's and dotQ6K's order (quant.go): each block's
// integer sums are exact; the block's float term is formed with one
// rounding per operation and added to the row's float sum, block by block.
// The x4 forms run four rows (stride bytes apart) block by block against
// one activation row, each row's sum kept in out.

// Q4KSC adds to Y10 the products of the unsigned bytes in Y0 and the
// signed bytes at off(DI), pairs summed and times R9's low byte, the
// group's scale; R9 moves on to the next scale.
#define Q4KSC(off) \
	VMOVDQU off(DI), Y1 \
	VPMADDUBSW Y1, Y0, Y4 \
	MOVBLZX R9, AX \
	VMOVD AX, X9 \
	VPBROADCASTW X9, Y9 \
	VPMADDWD Y9, Y4, Y4 \
	VPADDD Y4, Y10, Y10 \
	SHRQ $8, R9

// Q4KPAIR adds groups 2j and 2j+1: the nibbles of 32 bytes at qoff(r)
// times the activations at aoff(DI) and aoff+32(DI).
#define Q4KPAIR(r, qoff, aoff) \
	VMOVDQU qoff(r), Y2 \
	VPAND Y14, Y2, Y0 \
	Q4KSC(aoff) \
	VPSRLW $4, Y2, Y0 \
	VPAND Y14, Y0, Y0 \
	Q4KSC(aoff+32)

// Q4KUNPACK leaves in R9 the eight 6-bit scales of the Q4_K block at r,
// one a byte, and in DX its eight mins; clobbers AX, BX, R8.
#define Q4KUNPACK(r) \
	MOVL 4(r), AX \
	MOVL 8(r), BX \
	MOVL 12(r), DX \
	MOVL AX, R8 \
	SHRL $6, R8 \
	ANDL $0x03030303, R8 \
	SHLL $4, R8 \
	MOVL DX, R9 \
	ANDL $0x0f0f0f0f, R9 \
	ORL R8, R9 \
	ANDL $0x3f3f3f3f, AX \
	SHLQ $32, R9 \
	ORQ AX, R9 \
	MOVL BX, R8 \
	SHRL $6, R8 \
	ANDL $0x03030303, R8 \
	SHLL $4, R8 \
	SHRL $4, DX \
	ANDL $0x0f0f0f0f, DX \
	ORL R8, DX \
	ANDL $0x3f3f3f3f, BX \
	SHLQ $32, DX \
	ORQ BX, DX

// Q4KBLOCK adds to the float at acc the Q4_K block at r times the Q8_K
// block at DI: d·isum - dmin·msum with d = half(0(r))·d_x and dmin =
// half(2(r))·d_x. Needs Y14 = nib; clobbers AX, BX, DX, R8, R9, Y0-Y5,
// Y9, Y10.
#define Q4KBLOCK(r, acc) \
	PREFETCHT0 PFK(r) \
	Q4KUNPACK(r) \
	VMOVQ DX, X3 \
	VPMOVZXBD X3, Y3 \
	VMOVDQU 260(DI), Y1 \
	VPHADDD 292(DI), Y1, Y1 \
	VPERMQ $0xd8, Y1, Y1 \
	VPMULLD Y3, Y1, Y1 \
	HSUM(Y1, X1) \
	VCVTSI2SSL AX, X3, X3 \
	VPXOR Y10, Y10, Y10 \
	Q4KPAIR(r, 16, 4) \
	Q4KPAIR(r, 48, 68) \
	Q4KPAIR(r, 80, 132) \
	Q4KPAIR(r, 112, 196) \
	HSUM(Y10, X10) \
	VCVTSI2SSL AX, X10, X10 \
	MOVWLZX 0(r), AX \
	VMOVD AX, X1 \
	VCVTPH2PS X1, X1 \
	VMULSS (DI), X1, X1 \
	MOVWLZX 2(r), AX \
	VMOVD AX, X2 \
	VCVTPH2PS X2, X2 \
	VMULSS (DI), X2, X2 \
	VMULSS X10, X1, X1 \
	VMULSS X3, X2, X2 \
	VSUBSS X2, X1, X1 \
	VMOVSS acc, X2 \
	VADDSS X1, X2, X2 \
	VMOVSS X2, acc

// Q6KPART adds to Y10 the values v+32 (unsigned bytes in v) times the
// activations at off(DI), as (v+32)·y - 32·y pair sums, times the int8
// scales soff(r) (lanes 0-15) and soff+1(r) (16-31). Needs Y12 = b32.
#define Q6KPART(r, v, off, soff) \
	VMOVDQU off(DI), Y1 \
	VPMADDUBSW Y1, v, Y4 \
	VPMADDUBSW Y1, Y12, Y5 \
	VPSUBW Y5, Y4, Y4 \
	MOVBQSX soff(r), AX \
	VMOVD AX, X9 \
	VPBROADCASTW X9, X9 \
	MOVBQSX soff+1(r), AX \
	VMOVD AX, X11 \
	VPBROADCASTW X11, X11 \
	VINSERTI128 $1, X11, Y9, Y9 \
	VPMADDWD Y9, Y4, Y4 \
	VPADDD Y4, Y10, Y10

// Q6KHALF adds to Y10 one half (128 values) of the Q6_K block at r: low
// bits at ql(r), high bits at qh(r), scales at sc(r), activations at
// q8(DI). Needs Y14 = nib, Y13 = bits45.
#define Q6KHALF(r, ql, qh, sc, q8) \
	VMOVDQU ql(r), Y6 \
	VMOVDQU ql+32(r), Y7 \
	VMOVDQU qh(r), Y8 \
	VPAND Y14, Y6, Y0 \
	VPSLLW $4, Y8, Y2 \
	VPAND Y13, Y2, Y2 \
	VPOR Y2, Y0, Y0 \
	Q6KPART(r, Y0, q8, sc) \
	VPAND Y14, Y7, Y0 \
	VPSLLW $2, Y8, Y2 \
	VPAND Y13, Y2, Y2 \
	VPOR Y2, Y0, Y0 \
	Q6KPART(r, Y0, q8+32, sc+2) \
	VPSRLW $4, Y6, Y0 \
	VPAND Y14, Y0, Y0 \
	VPAND Y13, Y8, Y2 \
	VPOR Y2, Y0, Y0 \
	Q6KPART(r, Y0, q8+64, sc+4) \
	VPSRLW $4, Y7, Y0 \
	VPAND Y14, Y0, Y0 \
	VPSRLW $2, Y8, Y2 \
	VPAND Y13, Y2, Y2 \
	VPOR Y2, Y0, Y0 \
	Q6KPART(r, Y0, q8+96, sc+6)

// Q6KBLOCK adds to the float at acc the Q6_K block at r times the Q8_K
// block at DI: (half(208(r))·d_x)·isum. Clobbers AX, Y0-Y2, Y4-Y11.
#define Q6KBLOCK(r, acc) \
	PREFETCHT0 PFK(r) \
	PREFETCHT0 PFK+64(r) \
	PREFETCHT0 PFK+128(r) \
	VPXOR Y10, Y10, Y10 \
	Q6KHALF(r, 0, 128, 192, 4) \
	Q6KHALF(r, 64, 160, 200, 132) \
	HSUM(Y10, X10) \
	VCVTSI2SSL AX, X10, X10 \
	MOVWLZX 208(r), AX \
	VMOVD AX, X1 \
	VCVTPH2PS X1, X1 \
	VMULSS (DI), X1, X1 \
	VMULSS X10, X1, X1 \
	VMOVSS acc, X2 \
	VADDSS X1, X2, X2 \
	VMOVSS X2, acc

#define Q6KCONSTS \
	VMOVDQU nib<>(SB), Y14 \
	VMOVDQU bits45<>(SB), Y13 \
	VMOVDQU b32<>(SB), Y12

// func dotQ4KAVX(w *byte, x *q8KBlock, nb int) float32
TEXT ·dotQ4KAVX(SB), NOSPLIT, $0-28
	VMOVDQU nib<>(SB), Y14
	KROW1(Q4KBLOCK, 144)

// func dotQ4Kx4AVX(w *byte, stride int, x *q8KBlock, nb int, out *[4]float32)
TEXT ·dotQ4Kx4AVX(SB), NOSPLIT, $0-40
	VMOVDQU nib<>(SB), Y14
	KROW4(Q4KBLOCK, 144)

// func dotQ6KAVX(w *byte, x *q8KBlock, nb int) float32
TEXT ·dotQ6KAVX(SB), NOSPLIT, $0-28
	Q6KCONSTS
	KROW1(Q6KBLOCK, 210)

// func dotQ6Kx4AVX(w *byte, stride int, x *q8KBlock, nb int, out *[4]float32)
TEXT ·dotQ6Kx4AVX(SB), NOSPLIT, $0-40
	Q6KCONSTS
	KROW4(Q6KBLOCK, 210)

// func dotQ4Kr4AVX(w *byte, x *q8KBlock, xstride int, nb int, out *[4]float32)
// One Q4_K weight row times four Q8_K activation rows xstride bytes apart:
// each weight block is unpacked once for the four (prompt processing).
TEXT ·dotQ4Kr4AVX(SB), NOSPLIT, $256-40
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ xstride+16(FP), R8
	MOVQ nb+24(FP), CX
	MOVQ out+32(FP), R13
	LEAQ (DI)(R8*1), R10
	LEAQ (DI)(R8*2), R11
	LEAQ (R10)(R8*2), R12
	MOVQ $0, (R13)
	MOVQ $0, 8(R13)
	VMOVDQU nib<>(SB), Y14
	TESTQ CX, CX
	JLE done
loop:
	PREFETCHT0 PFK(SI)
	Q4KUNPACK(SI)
	VMOVQ DX, X8
	VPMOVZXBD X8, Y8
	Q4KSCALE(0)
	Q4KSCALE(32)
	Q4KSCALE(64)
	Q4KSCALE(96)
	Q4KSCALE(128)
	Q4KSCALE(160)
	Q4KSCALE(192)
	Q4KSCALE(224)
	VMOVDQU 16(SI), Y1
	VPAND Y14, Y1, Y0
	VPSRLW $4, Y1, Y1
	VPAND Y14, Y1, Y1
	VMOVDQU 48(SI), Y3
	VPAND Y14, Y3, Y2
	VPSRLW $4, Y3, Y3
	VPAND Y14, Y3, Y3
	VMOVDQU 80(SI), Y5
	VPAND Y14, Y5, Y4
	VPSRLW $4, Y5, Y5
	VPAND Y14, Y5, Y5
	VMOVDQU 112(SI), Y7
	VPAND Y14, Y7, Y6
	VPSRLW $4, Y7, Y7
	VPAND Y14, Y7, Y7
	MOVWLZX 0(SI), AX
	VMOVD AX, X13
	VCVTPH2PS X13, X13
	MOVWLZX 2(SI), AX
	VMOVD AX, X15
	VCVTPH2PS X15, X15
	Q4KXROW(DI, 0(R13))
	Q4KXROW(R10, 4(R13))
	Q4KXROW(R11, 8(R13))
	Q4KXROW(R12, 12(R13))
	ADDQ $144, SI
	ADDQ $324, DI
	ADDQ $324, R10
	ADDQ $324, R11
	ADDQ $324, R12
	DECQ CX
	JNZ loop
done:
	VZEROUPPER
	RET
