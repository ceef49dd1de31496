#!/usr/bin/python3
"""Tokenizer encode benchmark: fullband (build/bench/tokenize_bench) against npm tiktoken@1.0.22's
WASM build (bench/tiktoken_bench.mjs), both single-threaded, on the same files in the same run.

The corpora are written by scripts/tokenizer_corpus.mjs: real English prose (the Brown corpus)
and reStructuredText with code (Debian's linux-doc-6.1 sources). The two implementations run
alternately, --rounds times, each measuring the median of --reps encodes of every file; the
summary quotes the median over rounds of each side's MB/s and their ratio per corpus, by wall
clock and by CPU time (the latter is steadier when other work shares the cores), as text and
as JSON lines ({"summary": true, ...}) after the measurements' JSON lines.

usage: run_tokenize_bench.py [--fullband-bench PATH] [--rounds 3] [--reps 5] [--json-out FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run_json_lines(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fullband-bench", default=os.path.join(ROOT, "build", "bench", "tokenize_bench"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json-out")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="tokenize_bench_") as tmp:
        subprocess.run(["node", os.path.join(ROOT, "scripts", "tokenizer_corpus.mjs"), tmp],
                       check=True, stdout=subprocess.DEVNULL)
        files = [os.path.join(tmp, f"{name}.txt") for name in ("brown", "linux-doc")]
        rows = []
        for _ in range(args.rounds):
            rows += run_json_lines(["node", os.path.join(HERE, "tiktoken_bench.mjs"),
                                    "--reps", str(args.reps)] + files)
            rows += run_json_lines([args.fullband_bench, "--reps", str(args.reps)] + files)

    summary = []
    print("\ncorpus     MB    fullband MB/s  tiktoken MB/s  ratio  fullband Mtok/s  "
          "CPU-time MB/s: fullband  tiktoken  ratio")
    print(f"(medians of {args.rounds} rounds x {args.reps} reps)")
    for path in files:
        name = os.path.basename(path)[:-4]
        mine = [r for r in rows if r.get("file") == path and r["impl"] == "fullband"]
        ref = [r for r in rows if r.get("file") == path and r["impl"] == "tiktoken-wasm"]
        if mine[0]["tokens"] != ref[0]["tokens"]:
            print(f"{name}: token counts differ: {mine[0]['tokens']} vs {ref[0]['tokens']}")
            return 1
        a = statistics.median(r["mb_per_s"] for r in mine)
        b = statistics.median(r["mb_per_s"] for r in ref)
        tok = statistics.median(r["tokens_per_s"] for r in mine) / 1e6
        ca = statistics.median(r["cpu_mb_per_s"] for r in mine)
        cb = statistics.median(r["cpu_mb_per_s"] for r in ref)
        summary.append({"corpus": name, "bytes": mine[0]["bytes"], "tokens": mine[0]["tokens"],
                        "fullband_mb_per_s": a, "tiktoken_mb_per_s": b, "ratio": a / b,
                        "fullband_mtokens_per_s": tok, "fullband_cpu_mb_per_s": ca,
                        "tiktoken_cpu_mb_per_s": cb, "cpu_ratio": ca / cb, "cpu": mine[0]["cpu"]})
        print(f"{name:10s} {mine[0]['bytes'] / 1e6:5.1f} {a:14.2f} {b:14.2f} {a / b:6.2f} {tok:16.2f} "
              f"{ca:24.2f} {cb:9.2f} {ca / cb:6.2f}")
    loads = {impl: statistics.median(r["seconds"] for r in rows
                                     if r["bench"] == "tokenizer_load" and r["impl"] == impl)
             for impl in ("fullband", "tiktoken-wasm")}
    print(f"\nloading the ranks (median of rounds' medians): fullband {loads['fullband'] * 1e3:.1f} ms, "
          f"tiktoken {loads['tiktoken-wasm'] * 1e3:.1f} ms, "
          f"ratio {loads['tiktoken-wasm'] / loads['fullband']:.2f}")
    summary.append({"load": True, "fullband_seconds": loads["fullband"],
                    "tiktoken_seconds": loads["tiktoken-wasm"]})
    for s in summary:
        print(json.dumps({"summary": True, "rounds": args.rounds, "reps": args.reps, **s}))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
