package tensor

import (
	"math"
	"reflect"
	"testing"
)

func TestFitShape(t *testing.T) {
	cases := []struct {
		dims []int64
		n    int64
		want []int64
	}{
		{[]int64{-1}, 3, []int64{3}},
		{[]int64{1}, 1, []int64{1}},
		{[]int64{1}, 2, nil},
		{[]int64{-1, 2}, 4, []int64{2, 2}},
		{[]int64{-1, -1}, 4, []int64{1, 4}},
		{[]int64{3, -1}, 4, nil},
		{[]int64{}, 1, []int64{}},
		{[]int64{0, -1}, 0, []int64{0, 1}},
		{[]int64{-1}, 0, []int64{0}},
	}
	for _, tc := range cases {
		got, ok := FitShape(tc.dims, tc.n)
		if ok != (tc.want != nil) || ok && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("FitShape(%v, %d) = %v %v, want %v", tc.dims, tc.n, got, ok, tc.want)
		}
	}
}

func TestHalfFloats(t *testing.T) {
	for _, f := range []float32{0, 1, -2, 0.5, 65504, 6.1035156e-05, 5.9604645e-08, float32(math.Inf(1))} {
		if got := F16ToF32(F32ToF16(f)); got != f {
			t.Errorf("fp16 round trip %v = %v", f, got)
		}
	}
	for _, f := range []float32{0, 1, -2, 0.5, 3.0e38, 1.0 / 1024} {
		if got := BF16ToF32(F32ToBF16(f)); got != f && math.Abs(float64(got-f)/float64(f)) > 1.0/128 {
			t.Errorf("bf16 round trip %v = %v", f, got)
		}
	}
	if F32ToF16(1e6) != 0x7c00 || F32ToF16(1e-9) != 0 {
		t.Error("fp16 overflow/underflow")
	}
}
