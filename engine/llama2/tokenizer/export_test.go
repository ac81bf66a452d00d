package tokenizer

// ReferenceEncode is Encode with the quadratic merge of merge_test.go.
var ReferenceEncode = (*Tokenizer).referenceEncode
