//go:build amd64 && !purego

#include "textflag.h"

// quantQ8_0AVX (quantize_amd64.go) is roundQ8 for nb blocks of 32 floats
// in AVX2: the largest magnitude (VMAXPS, exact), the step amax/127 and
// its inverse 127/amax (VDIVSS, as Go divides), the values times the
// inverse (VMULPS) rounded to nearest, ties to even (VCVTPS2DQ under the
// default rounding mode), then packed to bytes in order.

DATA absmask<>+0(SB)/4, $0x7fffffff
GLOBL absmask<>(SB), RODATA|NOPTR, $4

DATA f127<>+0(SB)/4, $0x42fe0000
GLOBL f127<>(SB), RODATA|NOPTR, $4

DATA packorder<>+0(SB)/8, $0x0000000400000000
DATA packorder<>+8(SB)/8, $0x0000000500000001
DATA packorder<>+16(SB)/8, $0x0000000600000002
DATA packorder<>+24(SB)/8, $0x0000000700000003
GLOBL packorder<>(SB), RODATA|NOPTR, $32

// func quantQ8_0AVX(x *float32, out *q8Block, nb int)
TEXT ·quantQ8_0AVX(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ out+8(FP), DI
	MOVQ nb+16(FP), CX
	VBROADCASTSS absmask<>(SB), Y15
	VMOVSS f127<>(SB), X14
	VMOVDQU packorder<>(SB), Y13
	TESTQ CX, CX
	JLE done

loop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VANDPS Y15, Y0, Y4
	VANDPS Y15, Y1, Y5
	VANDPS Y15, Y2, Y6
	VANDPS Y15, Y3, Y7
	VMAXPS Y5, Y4, Y4
	VMAXPS Y7, Y6, Y6
	VMAXPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0x4e, X4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0xb1, X4, X5
	VMAXPS X5, X4, X4
	VDIVSS X14, X4, X6
	VMOVSS X6, (DI)
	VXORPS Y7, Y7, Y7
	VUCOMISS X7, X4
	JEQ scaled
	VDIVSS X4, X14, X7
	VBROADCASTSS X7, Y7

scaled:
	VMULPS Y7, Y0, Y0
	VMULPS Y7, Y1, Y1
	VMULPS Y7, Y2, Y2
	VMULPS Y7, Y3, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y13, Y0
	VMOVDQU Y0, 4(DI)
	ADDQ $128, SI
	ADDQ $36, DI
	DECQ CX
	JNZ loop

done:
	VZEROUPPER
	RET
