// OpenAI's tiktoken (npm package "tiktoken": the Rust core compiled to WebAssembly), gpt2 encoding,
// as the independent reference of trident's tokenizer.
//   node tiktoken_gpt2.cjs NPM_DIR encode INPUT OUTPUT   INPUT (UTF-8) -> OUTPUT: token ids, uint32 LE
//   node tiktoken_gpt2.cjs NPM_DIR documents INPUT OUTPUT INPUT: JSONL with a "text" string per line;
//                                                        OUTPUT: for each non-empty text, <|endoftext|>
//                                                        (50256) then its ids, uint32 LE (llm.c's layout)
//   node tiktoken_gpt2.cjs NPM_DIR bench INPUT SECONDS   prints tokens/s and MB/s of encoding INPUT
//                                                        (after one untimed pass), for SECONDS
// NPM_DIR holds node_modules/tiktoken (scripts/install-deps.sh installs the pinned version there).
// Text is encoded as ordinary text: "<|endoftext|>" in it is not the special token (encode_ordinary).
"use strict";
const fs = require("fs");
const path = require("path");

const [npmDir, mode, input, arg] = process.argv.slice(2);
if (!npmDir || !["encode", "documents", "bench"].includes(mode) || !input || !arg) {
  console.error("usage: node tiktoken_gpt2.cjs NPM_DIR encode|documents INPUT OUTPUT | bench INPUT SECONDS");
  process.exit(2);
}
let tiktoken;
try {
  tiktoken = require(path.join(path.resolve(npmDir), "node_modules", "tiktoken"));
} catch (e) {
  console.error(`tiktoken is not installed in ${npmDir} (scripts/install-deps.sh with TRIDENT_WITH_TEXT_TESTS=1 installs it): ${e.message}`);
  process.exit(3);
}
const version = require(path.join(path.resolve(npmDir), "node_modules", "tiktoken", "package.json")).version;
const enc = tiktoken.get_encoding("gpt2");
const bytes = fs.readFileSync(input);
const text = bytes.toString("utf8");

if (mode === "encode") {
  const ids = enc.encode_ordinary(text);
  fs.writeFileSync(arg, Buffer.from(new Uint32Array(ids).buffer));
  console.log(`tiktoken ${version}: ${ids.length} tokens`);
} else if (mode === "documents") {
  const ids = [];
  for (const line of text.split("\n")) {
    if (line.trim() === "") continue;
    const doc = JSON.parse(line).text;
    if (doc === "") continue;
    ids.push(50256);
    for (const id of enc.encode_ordinary(doc)) ids.push(id);
  }
  fs.writeFileSync(arg, Buffer.from(new Uint32Array(ids).buffer));
  console.log(`tiktoken ${version}: ${ids.length} tokens`);
} else {
  const seconds = Number(arg);
  enc.encode_ordinary(text);  // warm-up, not timed: node compiles the WebAssembly in tiers
  let tokens = 0, runs = 0;
  const start = process.hrtime.bigint();
  let elapsed = 0;
  do {
    tokens += enc.encode_ordinary(text).length;
    runs += 1;
    elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  } while (elapsed < seconds);
  console.log(`tiktoken ${version} (node ${process.version}) gpt2: ${runs} runs of ${bytes.length} bytes, ` +
              `${(tokens / elapsed / 1e6).toFixed(3)} M tokens/s, ${(runs * bytes.length / elapsed / 1e6).toFixed(2)} MB/s`);
}
enc.free();
