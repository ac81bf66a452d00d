package tritonhttp

import (
	"math"
	"strconv"
	"strings"
	"testing"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
	"github.com/streamgate/streamgate/proto/tensor"
)

// BenchmarkInferCodec measures one /infer request read and its identity
// answer written, per body size: binary (the extension, tritonclient's
// default) and JSON data. MB/s counts the request body.
func BenchmarkInferCodec(b *testing.B) {
	for _, n := range []int{16, 4096, 262144} { // FP32 elements: 64 B, 16 KiB, 1 MiB
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = float32(i) * 0.25
		}
		raw := make([]byte, 0, 4*n)
		for _, v := range vals {
			raw = append(raw, le32(math.Float32bits(v))...)
		}
		bin := `{"id":"1","inputs":[{"name":"INPUT0","shape":[` + strconv.Itoa(n) + `],"datatype":"FP32","parameters":{"binary_data_size":` + strconv.Itoa(4*n) + `}}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`
		binBody, binLen := body(bin, raw)
		var data strings.Builder
		for i, v := range vals {
			if i > 0 {
				data.WriteByte(',')
			}
			data.WriteString(strconv.FormatFloat(float64(v), 'g', -1, 32))
		}
		js := `{"id":"1","inputs":[{"name":"INPUT0","shape":[` + strconv.Itoa(n) + `],"datatype":"FP32","data":[` + data.String() + `]}],"outputs":[{"name":"OUTPUT0"}]}`
		for _, tc := range []struct {
			name string
			body []byte
			hl   int
		}{{"binary", binBody, binLen}, {"json", []byte(js), len(js)}} {
			b.Run(tc.name+"/"+strconv.Itoa(4*n)+"B", func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(tc.body)))
				var out []byte
				for b.Loop() {
					r, err := Parse(tc.body, tc.hl, "m", nil)
					if err != nil {
						b.Fatal(err)
					}
					resp := &pb.ModelInferResponse{ModelName: "m", ModelVersion: "1"}
					in := r.Inputs[0]
					tensor.ToResponse(resp, []*tensor.Tensor{{Name: "OUTPUT0", Datatype: in.Datatype, Shape: in.Shape, Raw: in.Raw}})
					if out, _, err = r.AppendResponse(out[:0], resp); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
