package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/streamgate/streamgate/engine/backend"
	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

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
//
// A model's numeric subdirectories (<model>/1/, <model>/2/, ...) are its
// versions; the config's version_policy picks the ones served (latest 1 by
// default), each with its own instances, queue and statistics. A model
// directory without version subdirectories serves version 1.
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
		available, err := versionDirs(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		versions := []int64{1}
		if len(available) > 0 {
			if versions, err = servedVersions(cfg, available); err != nil {
				return nil, fmt.Errorf("%s: %v", where, err)
			}
		}
		for _, v := range versions {
			m, err := newModelVersion(cfg, path.Join(label, e.Name()), strconv.FormatInt(v, 10), factories)
			if err != nil {
				for _, loaded := range models {
					_ = loaded.close()
				}
				return nil, fmt.Errorf("%s: %v", where, err)
			}
			models = append(models, m)
		}
	}
	sort.SliceStable(models, func(i, j int) bool { return models[i].Name < models[j].Name })
	return models, nil
}

// versionDirs lists a model directory's numeric subdirectories, ascending.
func versionDirs(fsys fs.FS, model string) ([]int64, error) {
	entries, err := fs.ReadDir(fsys, model)
	if err != nil {
		return nil, err
	}
	var versions []int64
	for _, e := range entries {
		if v, err := strconv.ParseInt(e.Name(), 10, 64); err == nil && e.IsDir() && v >= 0 {
			versions = append(versions, v)
		}
	}
	slices.Sort(versions)
	return versions, nil
}

// servedVersions applies cfg's version_policy to the available versions
// (ascending): latest N (N = 1 when unset), all, or specific ones.
func servedVersions(cfg *pb.ModelConfig, available []int64) ([]int64, error) {
	vp := cfg.GetVersionPolicy()
	switch {
	case vp.GetAll() != nil:
		return available, nil
	case vp.GetSpecific() != nil:
		var out []int64
		for _, v := range vp.GetSpecific().GetVersions() {
			if !slices.Contains(available, v) {
				return nil, fmt.Errorf("version_policy.specific: version %d has no directory", v)
			}
			out = append(out, v)
		}
		slices.Sort(out)
		if out = slices.Compact(out); len(out) == 0 {
			return nil, errors.New("version_policy.specific: names no version")
		}
		return out, nil
	}
	n := int(vp.GetLatest().GetNumVersions())
	if n <= 0 {
		n = 1
	}
	return available[max(0, len(available)-n):], nil
}

// NewModel validates cfg and builds its backend, as version 1. dir is where
// relative paths in the config's parameters resolve.
func NewModel(cfg *pb.ModelConfig, dir string, factories map[string]backend.Factory) (*Model, error) {
	return newModelVersion(cfg, dir, "1", factories)
}

func newModelVersion(cfg *pb.ModelConfig, dir, version string, factories map[string]backend.Factory) (*Model, error) {
	if err := validateConfig(cfg); err != nil {
		return nil, err
	}
	var seq *seqConfig
	if cfg.GetSequenceBatching() != nil {
		normalizeSequenceBatching(cfg)
		sc, err := newSeqConfig(cfg)
		if err != nil {
			return nil, err
		}
		seq = &sc
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
	if _, ok := b.(backend.BatchBackend); !ok && cfg.GetMaxBatchSize() > 0 {
		field := ""
		switch {
		case cfg.GetDynamicBatching() != nil:
			field = "dynamic_batching"
		case cfg.GetSequenceBatching() != nil:
			field = "sequence_batching"
		}
		if field != "" {
			if c, ok := b.(backend.Closer); ok {
				_ = c.Close()
			}
			return nil, fmt.Errorf("%s: backend %q does not execute batches of requests; use max_batch_size 0", field, kind)
		}
	}
	instances := 0
	for _, g := range cfg.GetInstanceGroup() {
		instances += max(int(g.GetCount()), 1)
	}
	if instances == 0 {
		instances = 1
	}
	return newModel(cfg, version, b, instances, seq), nil
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
	return validateDynamicBatching(cfg)
}

// validateDynamicBatching checks dynamic_batching as Triton does, with its
// texts.
func validateDynamicBatching(cfg *pb.ModelConfig) error {
	db := cfg.GetDynamicBatching()
	if db == nil {
		return nil
	}
	for _, n := range db.GetPreferredBatchSize() {
		if n <= 0 {
			return fmt.Errorf("dynamic_batching.preferred_batch_size: dynamic batching preferred size must be positive for %s", cfg.GetName())
		}
		if n > cfg.GetMaxBatchSize() {
			return fmt.Errorf("dynamic_batching.preferred_batch_size: dynamic batching preferred size must be <= max batch size for %s", cfg.GetName())
		}
	}
	if levels := db.GetPriorityLevels(); levels != 0 {
		if db.GetDefaultPriorityLevel() == 0 || db.GetDefaultPriorityLevel() > levels {
			return fmt.Errorf("dynamic_batching.default_priority_level: default priority level must be in range [1, %d] for %s", levels, cfg.GetName())
		}
		for level := range db.GetPriorityQueuePolicy() {
			if level == 0 || level > levels {
				return fmt.Errorf("dynamic_batching.priority_queue_policy: priority queue policy must have priority level in range [1, %d] for %s", levels, cfg.GetName())
			}
		}
	}
	if db.GetPreserveOrdering() {
		if db.GetPriorityLevels() > 1 {
			return fmt.Errorf("dynamic_batching.preserve_ordering: Only one priority level is allowed when 'preserve_ordering' is true for %s", cfg.GetName())
		}
		policies := []*pb.ModelQueuePolicy{db.GetDefaultQueuePolicy()}
		for _, p := range db.GetPriorityQueuePolicy() {
			policies = append(policies, p)
		}
		for _, p := range policies {
			if p.GetDefaultTimeoutMicroseconds() != 0 && p.GetTimeoutAction() == pb.ModelQueuePolicy_DELAY {
				return fmt.Errorf("dynamic_batching.preserve_ordering: Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true for %s", cfg.GetName())
			}
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
