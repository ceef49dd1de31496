// Reference token ids for the tokenizer parity tests, from npm tiktoken@1.0.22 (cl100k_base).
// Bytes are decoded with WHATWG's TextDecoder (ill-formed UTF-8 -> U+FFFD per maximal
// subpart; a leading U+FEFF is kept), then encoded: encode_ordinary, or encode(text, "all") with Phi-4's special tokens.
//
//   node tiktoken_ids.mjs cases IN OUT
//     IN: records [u8 allow_special][u32 n][n bytes]; OUT: per record
//     [u32 replaced][u32 count][count × u32 ids] (little-endian). `replaced` counts the U+FFFD
//     the decoder produced beyond those spelled out in the input.
//   node tiktoken_ids.mjs decode OUT
//     writes the bytes of every id below 100352 as [u32 n][n bytes], in id order.
//   node tiktoken_ids.mjs corpus OUTDIR
//     writes OUTDIR/<name>.txt and OUTDIR/<name>.ids (u32 ids) for each corpus of
//     scripts/tokenizer_corpus.mjs, and prints their sizes.
import { createRequire } from 'node:module';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { corpora, nodeModules } from '../../scripts/tokenizer_corpus.mjs';

const require = createRequire(join(nodeModules, '..', 'package.json'));
const { get_encoding } = require('tiktoken');
const { Tiktoken } = require('tiktoken/lite');

const ordinary = get_encoding('cl100k_base');
// Phi-4: cl100k_base's ranks, specials at 100256..100351 (named ones, <|dummy_N|> elsewhere).
const named = {
  '<|endoftext|>': 100257, '<|fim_prefix|>': 100258, '<|fim_middle|>': 100259,
  '<|fim_suffix|>': 100260, '<|im_start|>': 100264, '<|im_end|>': 100265, '<|im_sep|>': 100266,
  '<|endofprompt|>': 100276,
};
const specials = { ...named };
const taken = new Set(Object.values(named));
for (let id = 100256, dummy = 0; id < 100352; id++) {
  if (!taken.has(id)) specials[`<|dummy_${dummy++}|>`] = id;
}
let phi4 = null;  // built on first use: parsing the ranks takes a while
const phi4Encoder = () => {
  if (phi4 === null) {
    const cl100k = JSON.parse(
        readFileSync(join(nodeModules, 'tiktoken', 'encoders', 'cl100k_base.json'), 'utf8'));
    phi4 = new Tiktoken(cl100k.bpe_ranks, specials, cl100k.pat_str);
  }
  return phi4;
};
// ignoreBOM: a leading U+FEFF is text to tokenize, not a byte-order mark to drop.
const decoder = new TextDecoder('utf-8', { ignoreBOM: true });

function countReplacements(bytes, text) {
  let inText = 0, spelled = 0;
  for (const ch of text) if (ch === '\uFFFD') inText++;
  for (let i = 0; i + 2 < bytes.length; i++) {
    if (bytes[i] === 0xef && bytes[i + 1] === 0xbf && bytes[i + 2] === 0xbd) spelled++;
  }
  return inText - spelled;
}

function u32(values) {
  return Buffer.from(Uint32Array.from(values).buffer);
}

const [mode, a, b] = process.argv.slice(2);
if (mode === 'cases' && a && b) {
  const input = readFileSync(a);
  const out = [];
  for (let off = 0; off < input.length;) {
    const allow = input[off] !== 0;
    const n = input.readUInt32LE(off + 1);
    const bytes = input.subarray(off + 5, off + 5 + n);
    off += 5 + n;
    const text = decoder.decode(bytes);
    const ids = allow ? phi4Encoder().encode(text, 'all') : ordinary.encode_ordinary(text);
    out.push(u32([countReplacements(bytes, text), ids.length]), u32(ids));
  }
  writeFileSync(b, Buffer.concat(out));
} else if (mode === 'decode' && a) {
  // Every id of the Phi-4 vocabulary: [u32 n][n bytes] each, in id order.
  const out = [];
  for (let id = 0; id < 100352; id++) {
    const bytes = Buffer.from(phi4Encoder().decode(Uint32Array.of(id)));
    out.push(u32([bytes.length]), bytes);
  }
  writeFileSync(a, Buffer.concat(out));
} else if (mode === 'corpus' && a) {
  mkdirSync(a, { recursive: true });
  for (const { name, bytes } of corpora()) {
    const ids = ordinary.encode_ordinary(decoder.decode(bytes));
    writeFileSync(join(a, `${name}.txt`), bytes);
    writeFileSync(join(a, `${name}.ids`), u32(ids));
    console.log(`${name}: ${bytes.length} bytes, ${ids.length} tokens`);
  }
} else {
  console.error('usage: node tiktoken_ids.mjs cases IN OUT | decode OUT | corpus OUTDIR');
  process.exit(2);
}
