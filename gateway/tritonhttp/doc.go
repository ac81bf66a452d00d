// Package tritonhttp is Triton's HTTP/REST wire format: the KServe v2
// inference protocol with Triton's binary tensor data extension, and the
// JSON Triton's HTTP endpoint prints for model configuration, statistics
// and the repository index.
//
// Start with ParseHeaderLength and Parse (an /infer request body, JSON
// header plus raw tensors, into a ModelInferRequest), then Response (one
// ModelInferResponse into the body, JSON plus raw tensors, with the length
// of its JSON part). ModelConfig, Statistics and RepositoryIndex print the
// other routes' answers.
//
// Texts follow Triton's server (src/http_server.cc) and core. Every error
// Parse returns is an *Error whose Code is the class Triton gives it,
// except that the JSON accessor errors Triton's JSON library tags INTERNAL
// (a number where a string belongs, too few data elements, JSON that does
// not parse) are InvalidArgument here: they are the client's.
//
// Output JSON is written as Triton's JSON writer (rapidjson) writes it:
// compact, strings escaped only where JSON requires (control characters,
// quote, backslash) and otherwise copied byte for byte, doubles in
// rapidjson's shortest form (1.0, 0.10000000149011612, 1e30).
package tritonhttp
