package tensor

import (
	"math"
	"testing"
)

func TestElementText(t *testing.T) {
	for _, tc := range []struct {
		dt   string
		e    []byte
		want string
	}{
		{"BOOL", []byte{2}, "true"},
		{"BOOL", []byte{0}, "false"},
		{"INT8", []byte{0x80}, "-128"},
		{"INT16", []byte{0xfe, 0xff}, "-2"},
		{"INT32", []byte{0xff, 0xff, 0xff, 0x7f}, "2147483647"},
		{"INT64", []byte{0, 0, 0, 0, 0, 0, 0, 0x80}, "-9223372036854775808"},
		{"UINT8", []byte{0xff}, "255"},
		{"UINT16", []byte{0xff, 0xff}, "65535"},
		{"UINT32", []byte{0xff, 0xff, 0xff, 0xff}, "4294967295"},
		{"UINT64", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "18446744073709551615"},
	} {
		if got, ok := AppendInteger([]byte("x"), tc.dt, tc.e); !ok || string(got) != "x"+tc.want {
			t.Errorf("AppendInteger(%s, %x) = %q %v, want %q", tc.dt, tc.e, got, ok, tc.want)
		}
	}
	if got, ok := AppendInteger([]byte("x"), "FP32", []byte{0, 0, 0, 0}); ok || string(got) != "x" {
		t.Errorf("AppendInteger(FP32) = %q %v", got, ok)
	}
	for _, tc := range []struct {
		dt   string
		e    []byte
		want float64
	}{
		{"FP16", []byte{0x00, 0x3c}, 1},
		{"BF16", []byte{0x80, 0x3f}, 1},
		{"FP32", []byte{0x00, 0x00, 0xc0, 0xbf}, -1.5},
		{"FP64", []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x7f}, math.Inf(1)},
	} {
		if f, ok := Float(tc.dt, tc.e); !ok || f != tc.want {
			t.Errorf("Float(%s, %x) = %v %v, want %v", tc.dt, tc.e, f, ok, tc.want)
		}
	}
	if _, ok := Float("INT32", []byte{0, 0, 0, 0}); ok {
		t.Error("Float(INT32) ok")
	}
}
