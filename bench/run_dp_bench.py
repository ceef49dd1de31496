#!/usr/bin/env python3
"""Data-parallel throughput on this machine, baseline in the same run (docs/PERF.md).

For K = 1 and K = 3 on the `small` model of bench/train_step.cc (V = 100,352, D = 512, L = 8,
H = 8, T = 512, global batch 4), trains --steps steps three ways, interleaved --rounds times:
  one rank with 2 threads (`fullband train`, the baseline),
  DP2: `mpirun -np 2 fullband train` with 1 thread per rank,
and prints one JSON line per K with the median tokens/s of the steps after the first two, the
ratio DP2 / one rank, and the fraction of DP communication hidden behind backward:
1 − (exposed reduction time per step) / (time of the same all-reduce alone, allreduce_bench).
Then the all-reduce bus bandwidth line of allreduce_bench at the gradients' size.

usage: bench/run_dp_bench.py [--build build] [--steps 6] [--rounds 2]
"""
import argparse, json, os, random, re, statistics, struct, subprocess, sys, tempfile

MODEL = ("{vocab_size: 100352, eod_id: 100351, d_model: 512, n_layers: 8, n_heads: 8, "
         "n_kv_heads: 8, head_dim: 64, ffn_dim: 1408, max_seq_len: 1024, window: 0}")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def config(path, tokens, k, dp, threads, steps):
    with open(path, "w") as f:
        f.write(f"""model: {MODEL}
parallel: {{dp: {dp}}}
data: {{path: {tokens}, batch_size: 4, seq_len: 512}}
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
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    fullband = os.path.join(a.build, "cli", "fullband")
    tmp = tempfile.mkdtemp()
    tokens = os.path.join(tmp, "tokens.bin")
    rng = random.Random(0)  # random ids: throughput does not depend on the text
    with open(tokens, "wb") as f:
        f.write(struct.pack("<%dI" % (1 << 20), *(rng.randrange(100351) for _ in range(1 << 20))))
    grad_mb = None
    for k in (1, 3):
        one, dp2, exposed = [], [], []
        for _ in range(a.rounds):
            c1, c2 = os.path.join(tmp, "one.yaml"), os.path.join(tmp, "dp2.yaml")
            config(c1, tokens, k, 1, 2, a.steps)
            config(c2, tokens, k, 2, 1, a.steps)
            env1 = {"OMP_NUM_THREADS": "2"}
            rows, params = run([fullband, "train", c1, "--json"], env1)
            one += [r["tokens_per_s"] for r in rows]
            rows, _ = run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2", fullband,
                        "train", c2, "--json"], {**MPI_ENV, "OMP_NUM_THREADS": "1"})
            dp2 += [r["tokens_per_s"] for r in rows]
            exposed += [r["comm_exposed_s"] for r in rows]
        if grad_mb is None:  # the gradients: 4 bytes a parameter
            grad_mb = max(1, round(params * 4 / (1 << 20)))
        ar = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2",
                             os.path.join(a.build, "bench", "allreduce_bench"), "--mb",
                             str(grad_mb), "--reps", "5"], env={**os.environ, **MPI_ENV},
                            check=True, capture_output=True, text=True).stdout
        ar = json.loads(ar.splitlines()[-1])
        # bus bandwidth = 2·(n−1)/n · bytes / time, n = 2: time = bytes / bandwidth
        alone_s = grad_mb * (1 << 20) / 1e9 / ar["communicator_gbps"]
        hidden = 1 - statistics.median(exposed) / alone_s
        print(json.dumps({"bench": "dp", "model": "small", "passes": k,
                          "one_rank_2_threads_tokens_per_s": statistics.median(one),
                          "dp2_tokens_per_s": statistics.median(dp2),
                          "ratio": statistics.median(dp2) / statistics.median(one),
                          "exposed_reduction_s": statistics.median(exposed),
                          "reduction_alone_s": alone_s, "hidden_fraction": hidden}))
        sys.stdout.flush()
    print(json.dumps(ar))


if __name__ == "__main__":
    main()
