// Reference answers for the Go tokenizer and chat template tests, from
// Hugging Face's own JavaScript implementations: the @lenml tokenizers
// (a fork of transformers.js) and @huggingface/jinja.
//
// Reads one JSON request on stdin and writes one JSON answer on stdout:
//   {"encode": {"tokenizer": "llama3", "texts": [...]}} -> {"ids": [[...], ...]}
//      (no special tokens added; text spelling a special token is that token;
//      an optional "pre_tokenizer" replaces the tokenizer.json's own)
//   {"render": {"template": "...", "contexts": [{...}, ...]}} -> {"prompts": [...]}
//      (each context's strings are the template's variables; render errors
//      come back as {"error": "..."} in place of a prompt)
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const req = JSON.parse(readFileSync(0, "utf8"));
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
process.stdout.write(JSON.stringify(out));
