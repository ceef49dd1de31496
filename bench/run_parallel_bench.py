#!/usr/bin/env python3
"""Tensor- and data-parallel throughput on this machine, baseline in the same run
(docs/PERF.md).

For K = 1 and K = 3 on the `small` model of bench/train_step.cc (V = 100,352, D = 512, L = 8,
H = 8, T = 512, global batch 4; --model tiny: its `tiny`, for a quick check), trains --steps
steps these ways, interleaved --rounds times:
  one: one rank with 2 threads (`fullband train`, the baseline),
  dp2, dp2_zero1: `mpirun -np 2 fullband train` with 1 thread per rank, ZeRO-1 off and on,
  tp2: `mpirun -np 2 fullband train` with parallel.tp 2, 1 thread per rank,
(--layouts picks some; the baseline always runs) and prints one JSON line per K with the
median tokens/s of the steps after the first two, the ratios to one rank, and for dp2 the
median fraction of the gradient bytes whose all-reduce completed before backward ended
(hidden) and the median time waited for the reduction after backward. Then allreduce_bench's
lines at 4 MiB (a bucket) and at the gradients' size.

usage: bench/run_parallel_bench.py [--build build] [--model small|tiny] [--steps 6] [--rounds 2]
                                   [--layouts dp2,dp2_zero1,tp2] [--no-allreduce]
"""
import argparse, json, os, random, re, statistics, struct, subprocess, sys, tempfile

# --model: bench/train_step.cc's configs of the same names: (V, D, L, H, global batch, T).
MODELS = {"small": (100352, 512, 8, 8, 4, 512), "tiny": (4096, 256, 4, 4, 8, 256)}


def model_yaml(v, d, layers, heads):
    return (f"{{vocab_size: {v}, eod_id: {v - 1}, d_model: {d}, n_layers: {layers}, "
            f"n_heads: {heads}, n_kv_heads: {heads}, head_dim: {d // heads}, "
            f"ffn_dim: {(8 * d // 3 + 63) // 64 * 64}, max_seq_len: 1024, window: 0}}")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


# name: (tp, dp, threads per rank, zero1)
LAYOUTS = {"one": (1, 1, 2, "false"), "dp2": (1, 2, 1, "false"), "dp2_zero1": (1, 2, 1, "true"),
           "tp2": (2, 1, 1, "false")}


def config(path, model, tokens, k, tp, dp, threads, steps, zero1):
    v, d, layers, heads, batch, seq = MODELS[model]
    with open(path, "w") as f:
        f.write(f"""model: {model_yaml(v, d, layers, heads)}
parallel: {{tp: {tp}, dp: {dp}, zero1: {zero1}}}
data: {{path: {tokens}, batch_size: {batch}, seq_len: {seq}}}
optim: {{warmup_steps: 1}}
schedule: {{steps: {steps}, phases: [{{until: 1.0, mix: {{{k}: 1.0}}}}]}}
runtime: {{threads: {threads}, log_every: 1, peak_gflops: 1}}
""")


def run(cmd, env):
    p = subprocess.run(cmd, env={**os.environ, **env}, check=True, capture_output=True,
                       text=True)
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{") and '"step"' in l]
    m = re.search(r"training (\d+) parameters", p.stderr)
    return rows[2:], int(m[1]) if m else None  # the first two steps warm up


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", choices=sorted(MODELS), default="small")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--layouts", default="dp2,dp2_zero1,tp2")
    ap.add_argument("--no-allreduce", action="store_true")
    a = ap.parse_args()
    names = ["one"] + [n for n in a.layouts.split(",") if n]
    for n in names:
        if n not in LAYOUTS:
            sys.exit(f"--layouts: unknown layout {n!r}; known: {', '.join(LAYOUTS)}")
    fullband = os.path.join(a.build, "cli", "fullband")
    tmp = tempfile.mkdtemp()
    tokens = os.path.join(tmp, "tokens.bin")
    rng = random.Random(0)  # random ids: throughput does not depend on the text
    with open(tokens, "wb") as f:
        eod = MODELS[a.model][0] - 1
        f.write(struct.pack("<%dI" % (1 << 20), *(rng.randrange(eod) for _ in range(1 << 20))))
    grad_mb = None
    for k in (1, 3):
        tps = {name: [] for name in names}
        exposed, hidden = [], []
        for _ in range(a.rounds):
            for name in names:
                tp, dp, threads, zero1 = LAYOUTS[name]
                c = os.path.join(tmp, name + ".yaml")
                config(c, a.model, tokens, k, tp, dp, threads, a.steps, zero1)
                cmd = [fullband, "train", c, "--json"]
                if tp * dp > 1:
                    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np",
                           str(tp * dp)] + cmd
                rows, params = run(cmd, {**MPI_ENV, "OMP_NUM_THREADS": str(threads)})
                tps[name] += [r["tokens_per_s"] for r in rows]
                if name == "one":
                    grad_mb = grad_mb or max(1, round(params * 4 / (1 << 20)))
                if name == "dp2":
                    exposed += [r["comm_exposed_s"] for r in rows]
                    hidden += [r["comm_hidden"] for r in rows]
        med = {name: statistics.median(v) for name, v in tps.items()}
        line = {"bench": "parallel", "model": a.model, "passes": k,
                "one_rank_2_threads_tokens_per_s": med["one"]}
        for name in names[1:]:
            line[name + "_tokens_per_s"] = med[name]
            line[name + "_ratio"] = med[name] / med["one"]
        if hidden:
            line["dp2_hidden_fraction"] = statistics.median(hidden)
            line["dp2_exposed_reduction_s"] = statistics.median(exposed)
        print(json.dumps(line))
        sys.stdout.flush()
    if a.no_allreduce:
        return
    ar = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2",
                         os.path.join(a.build, "bench", "allreduce_bench"), "--mb",
                         f"4,{grad_mb}", "--reps", "7"], env={**os.environ, **MPI_ENV},
                        check=True, capture_output=True, text=True).stdout
    print(ar, end="")

if __name__ == "__main__":
    main()
