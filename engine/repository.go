package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// defaultMaxQueue bounds the requests of one model that wait for an
// instance when its config sets no dynamic_batching.default_queue_policy.
const defaultMaxQueue = 16384

// ParseConfig parses one config.pbtxt. Unknown fields and malformed values
// are errors that name the line, column and field.
func ParseConfig(data []byte) (*pb.ModelConfig, error) {
	cfg := &pb.ModelConfig{}
	if err := prototext.Unmarshal(data, cfg); err != nil {
		msg := strings.ReplaceAll(err.Error(), "\u00a0", " ")
		if f := fieldAt(data, msg); f != "" && !strings.Contains(msg, f) {
			msg += " (field " + f + ")"
		}
		return nil, errors.New(msg)
	}
	return cfg, nil
}

var (
	linePos   = regexp.MustCompile(`\(line (\d+):(\d+)\)`)
	lastField = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*:?\s*[\[{]?\s*$`)
)

// fieldAt names the field whose value a prototext error points at, for
// errors that give only a position.
func fieldAt(data []byte, msg string) string {
	m := linePos.FindStringSubmatch(msg)
	if m == nil {
		return ""
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) {
		return ""
	}
	text := lines[line-1]
	if col-1 < len(text) && col >= 1 {
		text = text[:col-1]
	}
	if f := lastField.FindStringSubmatch(text); f != nil {
		return f[1]
	}
	return ""
}

// LoadRepository reads every <model>/config.pbtxt under fsys (Triton's
// layout), validates it and builds its backend with the factory named by
// the config's backend (or platform) field. label names the repository in
// errors (a directory path, or "built-in"). Directories without a
// config.pbtxt are skipped, as Triton does with auto-complete off.
func LoadRepository(fsys fs.FS, label string, factories map[string]backend.Factory) ([]*Model, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("model repository %s: %w", label, err)
	}
	var models []*Model
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		file := path.Join(e.Name(), "config.pbtxt")
		data, err := fs.ReadFile(fsys, file)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		where := path.Join(label, file)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		cfg, err := ParseConfig(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", where, err)
		}
		if cfg.GetName() == "" {
			cfg.Name = e.Name()
		}
		if cfg.GetName() != e.Name() {
			return nil, fmt.Errorf("%s: name: model name %q must match its directory %q", where, cfg.GetName(), e.Name())
		}
		m, err := NewModel(cfg, path.Join(label, e.Name()), factories)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", where, err)
		}
		models = append(models, m)
	}
	sort.Slice(models, func(i, j int) bool { return models[i].Name < models[j].Name })
	return models, nil
}

// NewModel validates cfg and builds its backend. dir is where relative
// paths in the config's parameters resolve.
func NewModel(cfg *pb.ModelConfig, dir string, factories map[string]backend.Factory) (*Model, error) {
	if err := validateConfig(cfg); err != nil {
		return nil, err
	}
	kind := cfg.GetBackend()
	if kind == "" {
		kind = cfg.GetPlatform()
	}
	factory, ok := factories[kind]
	if !ok {
		return nil, fmt.Errorf("backend: unknown backend %q", kind)
	}
	b, err := factory(backend.Config{Model: cfg, Dir: dir})
	if err != nil {
		return nil, err
	}
	instances := 0
	for _, g := range cfg.GetInstanceGroup() {
		instances += int(g.GetCount())
	}
	if instances == 0 {
		instances = 1
	}
	maxQueue := defaultMaxQueue
	if q := cfg.GetDynamicBatching().GetDefaultQueuePolicy().GetMaxQueueSize(); q > 0 {
		maxQueue = int(q)
	}
	return newModel(cfg, b, instances, maxQueue), nil
}

func validateConfig(cfg *pb.ModelConfig) error {
	if cfg.GetBackend() == "" && cfg.GetPlatform() == "" {
		return errors.New("backend: must name a backend (or platform)")
	}
	if cfg.GetMaxBatchSize() < 0 {
		return fmt.Errorf("max_batch_size: must be non-negative, got %d", cfg.GetMaxBatchSize())
	}
	seen := map[string]bool{}
	for i, in := range cfg.GetInput() {
		if err := validateTensor("input", i, in.GetName(), in.GetDataType(), in.GetDims(), seen); err != nil {
			return err
		}
	}
	seen = map[string]bool{}
	for i, out := range cfg.GetOutput() {
		if err := validateTensor("output", i, out.GetName(), out.GetDataType(), out.GetDims(), seen); err != nil {
			return err
		}
	}
	if len(cfg.GetOutput()) == 0 {
		return errors.New("output: a model needs at least one output")
	}
	for i, g := range cfg.GetInstanceGroup() {
		if g.GetCount() < 0 {
			return fmt.Errorf("instance_group[%d].count: must be non-negative, got %d", i, g.GetCount())
		}
	}
	return nil
}

func validateTensor(kind string, i int, name string, dt pb.DataType, dims []int64, seen map[string]bool) error {
	field := kind + "[" + strconv.Itoa(i) + "]"
	if name == "" {
		return fmt.Errorf("%s.name: must not be empty", field)
	}
	if seen[name] {
		return fmt.Errorf("%s.name: duplicate %s %q", field, kind, name)
	}
	seen[name] = true
	if dt == pb.DataType_TYPE_INVALID {
		return fmt.Errorf("%s.data_type: %s %q needs a data_type", field, kind, name)
	}
	if len(dims) == 0 {
		return fmt.Errorf("%s.dims: %s %q needs dims", field, kind, name)
	}
	for _, d := range dims {
		if d < -1 || d == 0 {
			return fmt.Errorf("%s.dims: %s %q has invalid dimension %d", field, kind, name, d)
		}
	}
	return nil
}

// Datatype maps a config DataType to the protocol's datatype string.
func Datatype(dt pb.DataType) string {
	switch dt {
	case pb.DataType_TYPE_STRING:
		return "BYTES"
	case pb.DataType_TYPE_INVALID:
		return "INVALID"
	}
	return dt.String()[len("TYPE_"):]
}
