// Command goclient is a client of streamgate generated from openapi.yaml
// by oapi-codegen: TestOpenAPIClients copies this module to a temporary
// directory, generates package client there (types and client) and runs
// it against `streamgate serve` at STREAMGATE_URL with the API key
// STREAMGATE_API_KEY. Every call goes through the generated code, so a
// document that no longer describes the server fails here, when the
// generated code does not compile or when an answer does not decode into
// its documented type.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"slices"

	"streamgate.test/openapi-goclient/client"
)

func main() {
	if err := run(context.Background(), os.Getenv("STREAMGATE_URL"), os.Getenv("STREAMGATE_API_KEY"), os.Getenv("STREAMGATE_TEXT_MODEL")); err != nil {
		fmt.Fprintln(os.Stderr, "goclient:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url, key, model string) error {
	withKey := client.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+key)
		return nil
	})
	c, err := client.NewClientWithResponses(url, withKey)
	if err != nil {
		return err
	}
	for _, step := range []func(context.Context, *client.ClientWithResponses, string) error{chat, infer, storedResponse, keyed} {
		if err := step(ctx, c, model); err != nil {
			return err
		}
	}
	// Without the key: the documented 401 in OpenAI's shape.
	anon, err := client.NewClientWithResponses(url)
	if err != nil {
		return err
	}
	r, err := anon.ListModelsWithResponse(ctx)
	if err != nil {
		return err
	}
	if r.StatusCode() != http.StatusUnauthorized || r.JSON401 == nil || r.JSON401.Error.Code == nil || *r.JSON401.Error.Code != "invalid_api_key" {
		return fmt.Errorf("without a key: %d %s", r.StatusCode(), r.Body)
	}
	fmt.Printf("without the key: %d %s\n", r.StatusCode(), *r.JSON401.Error.Code)
	return nil
}

// unexpected describes an answer that is not the documented success.
func unexpected(what string, status int, body []byte) error {
	return fmt.Errorf("%s: %d %s", what, status, body)
}

// chat runs a non-streaming chat completion.
func chat(ctx context.Context, c *client.ClientWithResponses, model string) error {
	var content client.ChatMessage_Content
	if err := content.FromChatMessageContent0("one two three"); err != nil {
		return err
	}
	maxTokens := 3
	r, err := c.CreateChatCompletionWithResponse(ctx, nil, client.ChatCompletionRequest{
		Model:     model,
		Messages:  []client.ChatMessage{{Role: "user", Content: &content}},
		MaxTokens: &maxTokens,
	})
	if err != nil {
		return err
	}
	if r.JSON200 == nil || len(r.JSON200.Choices) != 1 {
		return unexpected("chat completion", r.StatusCode(), r.Body)
	}
	msg := r.JSON200.Choices[0].Message
	if r.JSON200.Object != "chat.completion" || msg.Role != "assistant" || msg.Content == "" || r.JSON200.Usage.CompletionTokens < 1 {
		return unexpected("chat completion", r.StatusCode(), r.Body)
	}
	fmt.Printf("chat completion: %q (%s)\n", msg.Content, r.JSON200.Choices[0].FinishReason)
	return nil
}

// infer runs Triton's /v2/models/{model}/infer on identity_int32.
func infer(ctx context.Context, c *client.ClientWithResponses, _ string) error {
	var req client.InferRequest
	id := "go-1"
	req.Id = &id
	data := make([]client.TensorData, 3)
	for i, v := range []float32{7, 8, 9} {
		var s client.Scalar
		if err := s.FromScalar1(v); err != nil {
			return err
		}
		if err := data[i].FromScalar(s); err != nil {
			return err
		}
	}
	req.Inputs = append(req.Inputs, struct {
		Data       *[]client.TensorData `json:"data,omitempty"`
		Datatype   string               `json:"datatype"`
		Name       string               `json:"name"`
		Parameters *struct {
			BinaryDataSize *int `json:"binary_data_size,omitempty"`
		} `json:"parameters,omitempty"`
		Shape []int `json:"shape"`
	}{Data: &data, Datatype: "INT32", Name: "INPUT0", Shape: []int{3}})
	r, err := c.ModelInferWithResponse(ctx, "identity_int32", req)
	if err != nil {
		return err
	}
	if r.JSON200 == nil || r.JSON200.Id == nil || *r.JSON200.Id != id || r.JSON200.ModelName != "identity_int32" || len(r.JSON200.Outputs) != 1 {
		return unexpected("infer", r.StatusCode(), r.Body)
	}
	out := r.JSON200.Outputs[0]
	var got []float32
	for _, s := range *out.Data {
		v, err := s.AsScalar1()
		if err != nil {
			return err
		}
		got = append(got, v)
	}
	if out.Name != "OUTPUT0" || out.Datatype != client.INT32 || !slices.Equal(out.Shape, []int{3}) || !slices.Equal(got, []float32{7, 8, 9}) {
		return unexpected("infer", r.StatusCode(), r.Body)
	}
	fmt.Printf("infer: %v\n", got)
	return nil
}

// storedResponse creates a Response and retrieves it by its id.
func storedResponse(ctx context.Context, c *client.ClientWithResponses, model string) error {
	var input client.ResponseRequest_Input
	if err := input.FromResponseRequestInput0("four five six"); err != nil {
		return err
	}
	maxTokens := 3
	created, err := c.CreateResponseWithResponse(ctx, client.ResponseRequest{Model: model, Input: input, MaxOutputTokens: &maxTokens})
	if err != nil {
		return err
	}
	if created.JSON200 == nil {
		return unexpected("create response", created.StatusCode(), created.Body)
	}
	r, err := c.RetrieveResponseWithResponse(ctx, created.JSON200.Id, nil)
	if err != nil {
		return err
	}
	got := r.JSON200
	if got == nil || got.Id != created.JSON200.Id || got.Object != "response" || !reflect.DeepEqual(got.Output, created.JSON200.Output) ||
		(got.Status != client.ResponseStatusCompleted && got.Status != client.ResponseStatusIncomplete) {
		return unexpected("retrieve response", r.StatusCode(), r.Body)
	}
	fmt.Printf("stored response %s: %s\n", got.Id, got.Status)
	return nil
}

// keyed lists the models with the key: its limits come back in the
// documented headers.
func keyed(ctx context.Context, c *client.ClientWithResponses, model string) error {
	r, err := c.ListModelsWithResponse(ctx)
	if err != nil {
		return err
	}
	if r.JSON200 == nil || !slices.ContainsFunc(r.JSON200.Data, func(m client.Model) bool { return m.Id == model }) {
		return unexpected("list models", r.StatusCode(), r.Body)
	}
	if r.HTTPResponse.Header.Get("x-ratelimit-limit-requests") == "" {
		return fmt.Errorf("list models: no x-ratelimit-limit-requests in %v", r.HTTPResponse.Header)
	}
	fmt.Printf("keyed: %d models, limit %s requests\n", len(r.JSON200.Data), r.HTTPResponse.Header.Get("x-ratelimit-limit-requests"))
	return nil
}
