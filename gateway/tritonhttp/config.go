package tritonhttp

import (
	"cmp"
	"encoding/base64"
	"math"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// ModelConfig prints cfg as Triton's HTTP endpoint does (its core's
// ModelConfigToJson): protobuf's JSON mapping with the .proto field names,
// in declaration order, every scalar, repeated and map field printed even
// when empty (singular messages and oneof members only when set), enums by
// name, 64-bit integers as strings except the dims, shapes, versions and
// microsecond fields that Triton turns back into numbers. An empty config
// prints nothing, as in Triton.
func ModelConfig(cfg *pb.ModelConfig) []byte {
	if proto.Size(cfg) == 0 {
		return []byte{}
	}
	return appendMessage(nil, cfg.ProtoReflect(), "")
}

// numericInt64 are the 64-bit fields Triton prints as numbers, by path of
// field names (list elements and map values add no name).
var numericInt64 = map[string]bool{
	"input.dims":                                    true,
	"input.reshape.shape":                           true,
	"output.dims":                                   true,
	"output.reshape.shape":                          true,
	"version_policy.specific.versions":              true,
	"dynamic_batching.max_queue_delay_microseconds": true,
	"dynamic_batching.priority_levels":              true,
	"dynamic_batching.default_priority_level":       true,
	"dynamic_batching.default_queue_policy.default_timeout_microseconds":  true,
	"dynamic_batching.priority_queue_policy.default_timeout_microseconds": true,
	"sequence_batching.max_sequence_idle_microseconds":                    true,
	"sequence_batching.oldest.max_queue_delay_microseconds":               true,
	"sequence_batching.direct.max_queue_delay_microseconds":               true,
	"sequence_batching.state.dims":                                        true,
	"ensemble_scheduling.step.model_version":                              true,
	"model_warmup.inputs.dims":                                            true,
}

func appendMessage(b []byte, m protoreflect.Message, path string) []byte {
	b = append(b, '{')
	fields := m.Descriptor().Fields()
	first := true
	for i := range fields.Len() {
		fd := fields.Get(i)
		singularMessage := fd.Message() != nil && !fd.IsList() && !fd.IsMap()
		if (singularMessage || fd.ContainingOneof() != nil) && !m.Has(fd) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		name := string(fd.Name())
		b = appendString(b, name)
		b = append(b, ':')
		b = appendField(b, fd, m.Get(fd), join(path, name))
	}
	return append(b, '}')
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func appendField(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) []byte {
	switch {
	case fd.IsList():
		l := v.List()
		b = append(b, '[')
		for i := range l.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, fd, l.Get(i), path)
		}
		return append(b, ']')
	case fd.IsMap():
		mp := v.Map()
		keys := make([]protoreflect.MapKey, 0, mp.Len())
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		slices.SortFunc(keys, compareKeys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k.String())
			b = append(b, ':')
			b = appendValue(b, fd.MapValue(), mp.Get(k), path)
		}
		return append(b, '}')
	}
	return appendValue(b, fd, v, path)
}

func compareKeys(a, c protoreflect.MapKey) int {
	switch x := a.Interface().(type) {
	case string:
		return strings.Compare(x, c.String())
	case bool:
		return cmp.Compare(a.String(), c.String())
	case uint32, uint64:
		return cmp.Compare(a.Uint(), c.Uint())
	}
	return cmp.Compare(a.Int(), c.Int())
}

// appendValue appends one value of fd's kind.
func appendValue(b []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) []byte {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendMessage(b, v.Message(), path)
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendString(b, string(ev.Name()))
		}
		return strconv.AppendInt(b, int64(v.Enum()), 10)
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool())
	case protoreflect.StringKind:
		return appendString(b, v.String())
	case protoreflect.BytesKind:
		return appendString(b, base64.StdEncoding.EncodeToString(v.Bytes()))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return strconv.AppendInt(b, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return strconv.AppendUint(b, v.Uint(), 10)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if numericInt64[path] {
			return strconv.AppendInt(b, v.Int(), 10)
		}
		return strconv.AppendQuote(b, strconv.FormatInt(v.Int(), 10))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if numericInt64[path] {
			return strconv.AppendUint(b, v.Uint(), 10)
		}
		return strconv.AppendQuote(b, strconv.FormatUint(v.Uint(), 10))
	case protoreflect.FloatKind:
		return appendProtoFloat(b, v.Float(), 32)
	}
	return appendProtoFloat(b, v.Float(), 64) // DoubleKind
}

// appendProtoFloat appends a float as protobuf's JSON writer prints it and
// Triton's JSON library then reprints it: an integral value as an integer,
// any other finite one as a double, NaN and infinities as protobuf's
// strings.
func appendProtoFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(b, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(b, `"-Infinity"`...)
	}
	s := strconv.FormatFloat(f, 'g', -1, bits)
	if !strings.ContainsAny(s, ".eE") {
		return append(b, s...)
	}
	d, _ := strconv.ParseFloat(s, 64)
	return appendDouble(b, d)
}
