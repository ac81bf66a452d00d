package llama2

import (
	"os"
	"path/filepath"

	pb "github.com/streamgate/streamgate/proto/inferencepb"
)

// BackendName is the config.pbtxt `backend:` value that selects this
// backend.
const BackendName = "llama2"

// Files of the built-in model, looked for by FindModelDir.
const (
	CheckpointFile = "stories260K.bin"
	TokenizerFile  = "tok512.bin"
)

// ParamGuidedDecoding is the config parameter by which a model tells the
// gateway which of vLLM's guided_decoding kinds its sampling_parameters
// honour (a comma-separated list); GuidedJSON is the kind of JSON schemas
// and json_object.
const (
	ParamGuidedDecoding = "guided_decoding"
	GuidedJSON          = "json"
)

// Defaults of the optional config parameters.
const (
	DefaultMaxSequences = 16 // parameters.max_sequences: KV caches, i.e. concurrent generations
	DefaultMaxQueue     = 64 // parameters.max_queue: requests waiting for a KV cache
	// DefaultMaxContext caps the context length a GGUF file declares
	// (parameters.max_context): 128K positions of a 7B model's KV cache
	// would be 16 GiB per sequence.
	DefaultMaxContext = 4096
	// DefaultKVCacheMB is the KV-cache memory of a GGUF model
	// (parameters.kv_cache_mb): max_sequences is lowered to what fits.
	DefaultKVCacheMB = 2048
)

// Config returns the model configuration of a llama2 text model named name:
// decoupled, unbatched (max_batch_size 0, the backend batches internally),
// with the vLLM-backend inputs and outputs, and the checkpoint and tokenizer
// paths as parameters. Its instance count exceeds what the backend admits
// (it releases instances at once), so the engine's scheduler never limits
// it; admission and queueing are the backend's.
func Config(name, checkpoint, tokenizer string) *pb.ModelConfig {
	str := func(v string) *pb.ModelParameter { return &pb.ModelParameter{StringValue: v} }
	return &pb.ModelConfig{
		Name:         name,
		Backend:      BackendName,
		MaxBatchSize: 0,
		Input: []*pb.ModelInput{
			{Name: inputText, DataType: pb.DataType_TYPE_STRING, Dims: []int64{1}},
			{Name: inputStream, DataType: pb.DataType_TYPE_BOOL, Dims: []int64{1}, Optional: true},
			{Name: inputParams, DataType: pb.DataType_TYPE_STRING, Dims: []int64{1}, Optional: true},
			{Name: inputExclude, DataType: pb.DataType_TYPE_BOOL, Dims: []int64{1}, Optional: true},
		},
		Output: []*pb.ModelOutput{
			{Name: outputText, DataType: pb.DataType_TYPE_STRING, Dims: []int64{-1}},
			{Name: outputFinish, DataType: pb.DataType_TYPE_STRING, Dims: []int64{1}},
			{Name: outputInputTokens, DataType: pb.DataType_TYPE_UINT32, Dims: []int64{1}},
			{Name: outputOutputTokens, DataType: pb.DataType_TYPE_UINT32, Dims: []int64{1}},
		},
		InstanceGroup: []*pb.ModelInstanceGroup{{
			Count: DefaultMaxSequences + DefaultMaxQueue,
			Kind:  pb.ModelInstanceGroup_KIND_CPU,
		}},
		Parameters: map[string]*pb.ModelParameter{
			paramCheckpoint: str(checkpoint),
			paramTokenizer:  str(tokenizer),
			// Guided decoding: sampling_parameters.guided_decoding takes
			// {"json": schema} and {"json_object": true}.
			ParamGuidedDecoding: str(GuidedJSON),
		},
		ModelTransactionPolicy: &pb.ModelTransactionPolicy{Decoupled: true},
	}
}

// EnvModelDir is the environment variable FindModelDir consults after the
// explicit directory.
const EnvModelDir = "STREAMGATE_MODEL_DIR"

// FindModelDir returns the first directory that holds both CheckpointFile
// and TokenizerFile, trying in order: explicit (a --model-dir flag; "" to
// skip), $STREAMGATE_MODEL_DIR, ./shared/models and ../shared/models. looked
// lists the directories tried, in order, for error messages. dir is "" when
// none has the files.
func FindModelDir(explicit string) (dir string, looked []string) {
	for _, d := range []string{explicit, os.Getenv(EnvModelDir), filepath.Join("shared", "models"), filepath.Join("..", "shared", "models")} {
		if d == "" {
			continue
		}
		looked = append(looked, d)
		if isFile(filepath.Join(d, CheckpointFile)) && isFile(filepath.Join(d, TokenizerFile)) {
			return d, looked
		}
	}
	return "", looked
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}
