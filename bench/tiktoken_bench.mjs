// Single-thread encode throughput of npm tiktoken@1.0.22 (its WASM build, cl100k_base,
// encode_ordinary) on the given text files: one JSON line per file like tokenize_bench's, after
// one with the median time of get_encoding.
// Each file is decoded to a JS string once, outside the timing (tiktoken's input is a string).
// cpu_mb_per_s uses the process's CPU time (steadier on a busy machine).
//
//   node bench/tiktoken_bench.mjs [--reps N] FILE...
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, '..', '.deps', 'npm', 'package.json'));
const { get_encoding } = require('tiktoken');

const args = process.argv.slice(2);
let reps = 5;
if (args[0] === '--reps') {
  reps = Number(args[1]);
  args.splice(0, 2);
}
if (!args.length || !(reps >= 1)) {
  console.error('usage: node bench/tiktoken_bench.mjs [--reps N] FILE...');
  process.exit(2);
}
// Loading: get_encoding builds the encoder from the package's ranks each time it is called.
{
  const times = [];
  for (let r = 0; r < reps; r++) {
    const t0 = process.hrtime.bigint();
    get_encoding('cl100k_base').free();
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  times.sort((a, b) => a - b);
  console.log(JSON.stringify({
    bench: 'tokenizer_load', impl: 'tiktoken-wasm',
    seconds: Number(times[Math.floor(times.length / 2)].toFixed(4)), reps,
  }));
}
const enc = get_encoding('cl100k_base');
const decoder = new TextDecoder('utf-8', { ignoreBOM: true });
for (const file of args) {
  const bytes = readFileSync(file);
  const text = decoder.decode(bytes);
  let tokens = enc.encode_ordinary(text).length;  // warm-up
  const times = [], cpu = [];
  for (let r = 0; r < reps; r++) {
    const t0 = process.hrtime.bigint(), c0 = process.cpuUsage();
    tokens = enc.encode_ordinary(text).length;
    const c = process.cpuUsage(c0);
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
    cpu.push((c.user + c.system) / 1e6);
  }
  const median = (v) => v.sort((a, b) => a - b)[Math.floor(v.length / 2)];
  const seconds = median(times), cpuSeconds = median(cpu);
  console.log(JSON.stringify({
    bench: 'tokenize', impl: 'tiktoken-wasm', file, bytes: bytes.length, tokens,
    seconds: Number(seconds.toFixed(4)), mb_per_s: Number((bytes.length / seconds / 1e6).toFixed(2)),
    tokens_per_s: Math.round(tokens / seconds),
    cpu_mb_per_s: Number((bytes.length / cpuSeconds / 1e6).toFixed(2)), reps, threads: 1,
  }));
}
