//go:build amd64 && !purego

#include "textflag.h"

// AVX2+FMA dot-product tiles for matmulRowsAVX (asm_amd64.go).
//
// Every product w·x of n floats is computed the same way whatever tile
// computes it, so results never depend on batching:
//   - one 8-lane accumulator, acc += w[j:j+8]*x[j:j+8] (VFMADD231PS) for
//     j = 0, 8, ... over n&^7 columns, then, if n&7 != 0, one more FMA of
//     the last n&7 columns loaded with VMASKMOVPS (the other lanes load as
//     zero and nothing past the row is read);
//   - the lanes l0..l7 reduced as ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7))
//     by two VHADDPS and one 128-bit add.
// Strides (ldw, ldx, ldo) are in floats. Each function ends with
// VZEROUPPER so the scalar Go code after it pays no AVX-SSE transition.

// tailmask<>+4*(8-k) holds eight int32 masks whose first k are all ones.
DATA tailmask<>+0(SB)/4, $-1
DATA tailmask<>+4(SB)/4, $-1
DATA tailmask<>+8(SB)/4, $-1
DATA tailmask<>+12(SB)/4, $-1
DATA tailmask<>+16(SB)/4, $-1
DATA tailmask<>+20(SB)/4, $-1
DATA tailmask<>+24(SB)/4, $-1
DATA tailmask<>+28(SB)/4, $-1
DATA tailmask<>+32(SB)/4, $0
DATA tailmask<>+36(SB)/4, $0
DATA tailmask<>+40(SB)/4, $0
DATA tailmask<>+44(SB)/4, $0
DATA tailmask<>+48(SB)/4, $0
DATA tailmask<>+52(SB)/4, $0
DATA tailmask<>+56(SB)/4, $0
DATA tailmask<>+60(SB)/4, $0
GLOBL tailmask<>(SB), RODATA|NOPTR, $64

// LOADMASK sets Ymask to the mask of the first rem (1..7) lanes.
#define LOADMASK(rem, tmp, ymask) \
	LEAQ tailmask<>+32(SB), tmp \
	SHLQ $2, rem \
	SUBQ rem, tmp \
	VMOVDQU (tmp), ymask

// REDUCE4 leaves in the low 128 bits of a the four lane sums of a, b, c, d
// (clobbering b, c, d's registers).
#define REDUCE4(a, b, c, d, xa, xb) \
	VHADDPS b, a, a \
	VHADDPS d, c, c \
	VHADDPS c, a, a \
	VEXTRACTF128 $1, a, xb \
	VADDPS xb, xa, xa

// func dot8x1(w *float32, ldw int, x *float32, n int, out *float32)
// out[i] = w[i*ldw:]·x for i < 8.
TEXT ·dot8x1(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ ldw+8(FP), BX
	SHLQ $2, BX
	MOVQ x+16(FP), DI
	MOVQ n+24(FP), CX
	LEAQ (SI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	LEAQ (R10)(BX*1), R11
	LEAQ (R11)(BX*1), R12
	LEAQ (R12)(BX*1), R13
	LEAQ (R13)(BX*1), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $3, BX
	JZ   tail8x1

loop8x1:
	VMOVUPS     (DI)(AX*1), Y8
	VFMADD231PS (SI)(AX*1), Y8, Y0
	VFMADD231PS (R8)(AX*1), Y8, Y1
	VFMADD231PS (R9)(AX*1), Y8, Y2
	VFMADD231PS (R10)(AX*1), Y8, Y3
	VFMADD231PS (R11)(AX*1), Y8, Y4
	VFMADD231PS (R12)(AX*1), Y8, Y5
	VFMADD231PS (R13)(AX*1), Y8, Y6
	VFMADD231PS (DX)(AX*1), Y8, Y7
	ADDQ        $32, AX
	DECQ        BX
	JNZ         loop8x1

tail8x1:
	ANDQ $7, CX
	JZ   done8x1
	LOADMASK(CX, BX, Y9)
	VMASKMOVPS  (DI)(AX*1), Y9, Y8
	VMASKMOVPS  (SI)(AX*1), Y9, Y10
	VFMADD231PS Y10, Y8, Y0
	VMASKMOVPS  (R8)(AX*1), Y9, Y10
	VFMADD231PS Y10, Y8, Y1
	VMASKMOVPS  (R9)(AX*1), Y9, Y10
	VFMADD231PS Y10, Y8, Y2
	VMASKMOVPS  (R10)(AX*1), Y9, Y10
	VFMADD231PS Y10, Y8, Y3
	VMASKMOVPS  (R11)(AX*1), Y9, Y10
	VFMADD231PS Y10, Y8, Y4
	VMASKMOVPS  (R12)(AX*1), Y9, Y10
	VFMADD231PS Y10, Y8, Y5
	VMASKMOVPS  (R13)(AX*1), Y9, Y10
	VFMADD231PS Y10, Y8, Y6
	VMASKMOVPS  (DX)(AX*1), Y9, Y10
	VFMADD231PS Y10, Y8, Y7

done8x1:
	MOVQ out+32(FP), DI
	REDUCE4(Y0, Y1, Y2, Y3, X0, X1)
	REDUCE4(Y4, Y5, Y6, Y7, X4, X5)
	VMOVUPS X0, (DI)
	VMOVUPS X4, 16(DI)
	VZEROUPPER
	RET

// func dot4x2(w *float32, ldw int, x *float32, ldx int, n int, out *float32, ldo int)
// out[b*ldo+i] = w[i*ldw:]·x[b*ldx:] for i < 4, b < 2.
TEXT ·dot4x2(SB), NOSPLIT, $0-56
	MOVQ w+0(FP), SI
	MOVQ ldw+8(FP), BX
	SHLQ $2, BX
	MOVQ x+16(FP), DI
	MOVQ ldx+24(FP), DX
	SHLQ $2, DX
	ADDQ DI, DX
	MOVQ n+32(FP), CX
	LEAQ (SI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	LEAQ (R9)(BX*1), R10
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $3, BX
	JZ   tail4x2

loop4x2:
	VMOVUPS     (DI)(AX*1), Y8
	VMOVUPS     (DX)(AX*1), Y9
	VMOVUPS     (SI)(AX*1), Y10
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y10, Y9, Y4
	VMOVUPS     (R8)(AX*1), Y11
	VFMADD231PS Y11, Y8, Y1
	VFMADD231PS Y11, Y9, Y5
	VMOVUPS     (R9)(AX*1), Y10
	VFMADD231PS Y10, Y8, Y2
	VFMADD231PS Y10, Y9, Y6
	VMOVUPS     (R10)(AX*1), Y11
	VFMADD231PS Y11, Y8, Y3
	VFMADD231PS Y11, Y9, Y7
	ADDQ        $32, AX
	DECQ        BX
	JNZ         loop4x2

tail4x2:
	ANDQ $7, CX
	JZ   done4x2
	LOADMASK(CX, BX, Y12)
	VMASKMOVPS  (DI)(AX*1), Y12, Y8
	VMASKMOVPS  (DX)(AX*1), Y12, Y9
	VMASKMOVPS  (SI)(AX*1), Y12, Y10
	VFMADD231PS Y10, Y8, Y0
	VFMADD231PS Y10, Y9, Y4
	VMASKMOVPS  (R8)(AX*1), Y12, Y11
	VFMADD231PS Y11, Y8, Y1
	VFMADD231PS Y11, Y9, Y5
	VMASKMOVPS  (R9)(AX*1), Y12, Y10
	VFMADD231PS Y10, Y8, Y2
	VFMADD231PS Y10, Y9, Y6
	VMASKMOVPS  (R10)(AX*1), Y12, Y11
	VFMADD231PS Y11, Y8, Y3
	VFMADD231PS Y11, Y9, Y7

done4x2:
	MOVQ out+40(FP), DI
	MOVQ ldo+48(FP), DX
	REDUCE4(Y0, Y1, Y2, Y3, X0, X1)
	REDUCE4(Y4, Y5, Y6, Y7, X4, X5)
	VMOVUPS X0, (DI)
	VMOVUPS X4, (DI)(DX*4)
	VZEROUPPER
	RET

// func dot1x1(w, x *float32, n int) float32
TEXT ·dot1x1(SB), NOSPLIT, $0-28
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	XORQ AX, AX
	MOVQ CX, BX
	SHRQ $3, BX
	JZ   tail1x1

loop1x1:
	VMOVUPS     (DI)(AX*1), Y8
	VFMADD231PS (SI)(AX*1), Y8, Y0
	ADDQ        $32, AX
	DECQ        BX
	JNZ         loop1x1

tail1x1:
	ANDQ $7, CX
	JZ   done1x1
	LOADMASK(CX, BX, Y9)
	VMASKMOVPS  (DI)(AX*1), Y9, Y8
	VMASKMOVPS  (SI)(AX*1), Y9, Y10
	VFMADD231PS Y10, Y8, Y0

done1x1:
	VMOVAPS Y0, Y1
	VMOVAPS Y0, Y2
	VMOVAPS Y0, Y3
	REDUCE4(Y0, Y1, Y2, Y3, X0, X1)
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func cpuid(eax, ecx uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eax+0(FP), AX
	MOVL ecx+4(FP), CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET

// func xgetbv0() uint32 (the low half of XCR0)
TEXT ·xgetbv0(SB), NOSPLIT, $0-4
	MOVL $0, CX
	XGETBV
	MOVL AX, ret+0(FP)
	RET
