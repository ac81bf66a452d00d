// A client of streamgate generated from openapi.yaml: openapi-typescript
// writes ./api.d.ts beside this file (TestOpenAPIClients does, in a
// temporary directory), tsc compiles both with strict checks, and the
// result runs against `streamgate serve` at STREAMGATE_URL with the API
// key STREAMGATE_API_KEY. Every call goes through the generated types:
// a document that no longer describes what the server does fails here,
// at compile time or at run time.
import assert from "node:assert/strict";
import createClient from "openapi-fetch";
import type { paths } from "./api.js";

// One event's data on the chat completion's event stream, as the document
// types it.
type ChatStreamEvent = paths["/v1/chat/completions"]["post"]["responses"][200]["content"]["text/event-stream"];

const baseUrl = process.env.STREAMGATE_URL!;
const key = process.env.STREAMGATE_API_KEY!;
const model = process.env.STREAMGATE_TEXT_MODEL!;
// The JSON client: the answers of the non-streaming calls, typed by their
// application/json schemas.
const client = createClient<paths, "application/json">({ baseUrl, headers: { Authorization: `Bearer ${key}` } });

// A non-streaming chat completion.
{
  const { data, error, response } = await client.POST("/v1/chat/completions", {
    body: { model, messages: [{ role: "user", content: "one two three" }], max_tokens: 3 },
  });
  assert.equal(error, undefined, `chat: ${response.status} ${JSON.stringify(error)}`);
  assert.equal(data!.object, "chat.completion");
  const choice = data!.choices[0];
  assert.equal(choice.message.role, "assistant");
  assert.ok(choice.message.content, "chat: empty content");
  assert.ok(data!.usage.completion_tokens > 0);
  console.log(`chat completion: ${JSON.stringify(choice.message.content)} (${choice.finish_reason})`);
}

// A streaming chat completion: the request typed, each event's data read
// into the generated event type.
{
  const { response } = await client.POST("/v1/chat/completions", {
    body: { model, messages: [{ role: "user", content: "one two three" }], max_tokens: 3, stream: true },
    parseAs: "stream",
  });
  assert.equal(response.status, 200);
  const text = await response.text();
  const events: ChatStreamEvent[] = text
    .split("\n")
    .filter((line) => line.startsWith("data: "))
    .map((line) => line.slice("data: ".length))
    .map((data) => (data === "[DONE]" ? data : (JSON.parse(data) as ChatStreamEvent)));
  assert.equal(events.at(-1), "[DONE]");
  let streamed = "";
  for (const ev of events) {
    if (typeof ev === "object" && "choices" in ev) {
      streamed += ev.choices[0]?.delta.content ?? "";
    }
  }
  assert.ok(streamed, "stream: no content");
  console.log(`chat stream: ${events.length} events, ${JSON.stringify(streamed)}`);
}

// Triton's /v2/models/{model}/infer (KServe v2, JSON data).
{
  const { data, error, response } = await client.POST("/v2/models/{model}/infer", {
    params: { path: { model: "identity_int32" } },
    body: { id: "ts-1", inputs: [{ name: "INPUT0", shape: [3], datatype: "INT32", data: [7, 8, 9] }] },
  });
  assert.equal(error, undefined, `infer: ${response.status} ${JSON.stringify(error)}`);
  assert.equal(data!.id, "ts-1");
  assert.equal(data!.model_name, "identity_int32");
  assert.deepEqual(data!.outputs.map((o) => [o.name, o.datatype, o.shape, o.data]), [["OUTPUT0", "INT32", [3], [7, 8, 9]]]);
  console.log(`infer: ${JSON.stringify(data!.outputs[0].data)}`);
}

// A stored Response, created and then retrieved by its id.
{
  const created = await client.POST("/v1/responses", {
    body: { model, input: "four five six", max_output_tokens: 3 },
  });
  assert.equal(created.error, undefined, `create response: ${created.response.status} ${JSON.stringify(created.error)}`);
  const id = created.data!.id;
  const { data, error, response } = await client.GET("/v1/responses/{id}", { params: { path: { id } } });
  assert.equal(error, undefined, `retrieve response: ${response.status} ${JSON.stringify(error)}`);
  assert.equal(data!.id, id);
  assert.equal(data!.object, "response");
  assert.ok(data!.status === "completed" || data!.status === "incomplete", `status ${data!.status}`);
  assert.deepEqual(data!.output, created.data!.output);
  const first = data!.output[0];
  console.log(`stored response ${id}: ${data!.status}, ${JSON.stringify(first?.type === "message" ? first.content[0]?.text : first)}`);
}

// Keyed requests: the key's limits come back in the documented headers,
// and a request without a key gets the documented 401 in OpenAI's shape.
{
  const { data, error, response } = await client.GET("/v1/models");
  assert.equal(error, undefined, `models: ${response.status} ${JSON.stringify(error)}`);
  assert.ok(data!.data.some((m) => m.id === model), `models: no ${model}`);
  assert.ok(Number(response.headers.get("x-ratelimit-limit-requests")) > 0, "no x-ratelimit-limit-requests");
  const anonymous = createClient<paths, "application/json">({ baseUrl });
  const refused = await anonymous.GET("/v1/models");
  assert.equal(refused.response.status, 401);
  assert.equal(refused.data, undefined);
  assert.equal(refused.error!.error.code, "invalid_api_key");
  console.log(`keyed: ${data!.data.length} models; without the key: ${refused.response.status} ${refused.error!.error.code}`);
}
