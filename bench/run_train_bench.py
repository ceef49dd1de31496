#!/usr/bin/python3
"""Training-step benchmark matrix: fullband (build/bench/train_step) against the PyTorch CPU
baseline (bench/torch_train_step.py), one process per measurement so that peak RSS is per
configuration, the two implementations interleaved row by row (same machine conditions).

Rows: config tiny and small; K = 1, 2, 3 with recompute none; and on small also recompute full
for K = 1 and K = 3.  With --repeat R the whole matrix runs R rounds, one after another, and
within a round each row runs torch and fullband back to back (which goes first alternates by
round), so that a slow phase of the machine hits both sides of a ratio.  Prints every JSON line
(with its round), then the summary, as JSON lines ({"summary": ...}) and as text, in which every
ratio is taken within a round and reported as the median over rounds [smallest-largest]:
  - fullband tokens/s / torch tokens/s per row;
  - K-pass step time / (K x one-pass step time) per implementation and config;
  - recompute full / none: peak RSS and step time ratios per implementation.

PyTorch runs with its best settings, set in the torch subprocess's environment only (see
TORCH_BEST_ENV and --env-sweep, which measures the alternatives): OpenBLAS's own kernel choice
for the CPU (OPENBLAS_CORETYPE unset; this environment sets Haswell, i.e. AVX2 kernels),
GOMP_SPINCOUNT=0, ATen's AVX-512 kernels where the CPU has them (ATEN_CPU_CAPABILITY=avx512;
torch 1.13 defaults to AVX2), and glibc malloc kept from returning freed memory to the kernel
(no mmap'd chunks, no trimming): on this VM a first-touch page fault costs ~10-15 us, so PyTorch's per-op
allocations of fresh memory otherwise dominate the step (the usual advice for PyTorch on CPU is
jemalloc/tcmalloc via LD_PRELOAD; neither is installed here, these glibc settings do the same
job).  fullband runs with the environment as given.

usage: run_train_bench.py [--fullband PATH] [--steps N] [--warmup W] [--only tiny|small]
                          [--threads 2] [--peak-gflops X] [--repeat R] [--json-out FILE]
                          [--torch-malloc keep|thp|default] [--no-torch] [--no-fullband]
       run_train_bench.py --env-sweep [--only tiny|small] [--steps N] [--repeat R]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TORCH_SCRIPT = os.path.join(HERE, "torch_train_step.py")
PYTHON = "/usr/bin/python3"  # Debian's python3 has python3-torch

MALLOC_KEEP = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 36)}
# Allocations of 32 MiB and more mmapped with transparent huge pages, the rest kept: RSS close
# to PyTorch's live peak (no heap fragmentation), fewer faults than glibc's defaults, slower.
MALLOC_THP = {"MALLOC_MMAP_MAX_": None, "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
              "MALLOC_TRIM_THRESHOLD_": str(1 << 36), "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
MALLOC_CHOICES = {"keep": {}, "thp": MALLOC_THP, "default": {k: None for k in MALLOC_KEEP}}


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# ATen's AVX-512 kernels need all four; forced on a CPU without them, torch dies of SIGILL.
HAS_AVX512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= cpu_flags()
# What the torch subprocess gets on top of (or removed from) the inherited environment.
TORCH_BEST_ENV = dict(OPENBLAS_CORETYPE=None, GOMP_SPINCOUNT="0",
                      ATEN_CPU_CAPABILITY="avx512" if HAS_AVX512 else None, **MALLOC_KEEP)
ENV_VARIANTS = {  # --env-sweep: each a change to TORCH_BEST_ENV
    "best": {},
    "coretype=SkylakeX": {"OPENBLAS_CORETYPE": "SkylakeX"},
    "coretype=Haswell": {"OPENBLAS_CORETYPE": "Haswell"},
    "aten_capability=default(avx2)": {"ATEN_CPU_CAPABILITY": None},
    "gomp_spincount=default": {"GOMP_SPINCOUNT": None},
    "malloc=default": {k: None for k in MALLOC_KEEP},
    "malloc=thp(mmap>=32MiB,hugetlb)": MALLOC_THP,
    "as_given(no changes)": "raw",
}


def torch_env(changes=None):
    env = dict(os.environ)
    spec = dict(TORCH_BEST_ENV)
    if changes == "raw":
        return env
    spec.update(changes or {})
    for k, v in spec.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_json(cmd, env, label):
    """Runs cmd, returns the last JSON object it printed on stdout (or an error record)."""
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    except subprocess.TimeoutExpired:
        return {"error": f"{label}: timed out"}
    rec = None
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if "tokens_per_s" in d:
                rec = d
    if p.returncode != 0 or rec is None:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        how = (f"killed by {signal.Signals(-p.returncode).name}" if p.returncode < 0
               else f"exit {p.returncode}")
        return {"error": f"{label}: {how}: " + " | ".join(tail)}
    return rec


def measure_peak(threads):
    code = ("import torch,time;torch.set_num_threads(%d);a=torch.randn(2048,2048);b=torch.randn(2048,2048)\n"
            "for _ in range(3): torch.mm(a,b)\n"
            "best=1e9\n"
            "for _ in range(10):\n"
            "  t=time.perf_counter();torch.mm(a,b);best=min(best,time.perf_counter()-t)\n"
            "print(2*2048**3/best/1e9)" % threads)
    p = subprocess.run([PYTHON, "-c", code], env=torch_env(), capture_output=True, text=True)
    return float(p.stdout.strip())


def rows(only):
    out = []
    for cfg in ("tiny", "small"):
        if only and cfg != only:
            continue
        for K in (1, 2, 3):
            out.append((cfg, K, "none"))
        if cfg == "small":
            out += [(cfg, 1, "full"), (cfg, 3, "full")]
    return out


def flags(cfg, K, rc, a, peak):
    return ["--config", cfg, "--passes", str(K), "--recompute", rc, "--steps", str(a.steps),
            "--warmup", str(a.warmup), "--threads", str(a.threads), "--peak-gflops", f"{peak:.1f}"]


def fmt(v, nd=2):
    return "-" if v is None else f"{v:.{nd}f}"


def over_rounds(values):
    """{"median", "min", "max", "rounds"} of per-round values, or None if there are none."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "rounds": len(values)}


def summarize(results, impls):
    """The summary as JSON records; every ratio is taken within one round, then over rounds."""
    rounds = sorted({r["round"] for r in results})
    get = {(r.get("impl"), r.get("config"), r.get("passes"), r.get("recompute"), r["round"]): r
           for r in results if "error" not in r}

    def median_of(impl, row, key):
        vs = [get[(impl,) + row + (rd,)][key] for rd in rounds if (impl,) + row + (rd,) in get]
        return statistics.median(vs) if vs else None

    def ratio(num, den, key, scale=1.0):  # per round: num[key] / den[key] / scale
        pairs = [(get.get(num + (rd,)), get.get(den + (rd,))) for rd in rounds]
        return over_rounds([a[key] / b[key] / scale for a, b in pairs if a and b])

    out = []
    row_keys = sorted({k[1:4] for k in get}, key=lambda x: (x[0] != "tiny", x[2] != "none", x[1]))
    for row in row_keys:
        rec = {"summary": "row", "config": row[0], "passes": row[1], "recompute": row[2],
               "ratio": ratio(("fullband",) + row, ("torch",) + row, "tokens_per_s")}
        for impl in ("torch", "fullband"):
            for key in ("tokens_per_s", "peak_rss_mib", "mfu"):
                rec[f"{impl}_{key}"] = median_of(impl, row, key)
        out.append(rec)
    for impl in impls:
        for cfg in ("tiny", "small"):
            for K in (2, 3):
                r = ratio((impl, cfg, K, "none"), (impl, cfg, 1, "none"), "step_s_median", K)
                if r:
                    out.append({"summary": "k_pass", "impl": impl, "config": cfg, "passes": K,
                                "step_over_k_one_pass_steps": r})
        for K in (1, 3):
            full, none = (impl, "small", K, "full"), (impl, "small", K, "none")
            rss, step = ratio(full, none, "peak_rss_mib"), ratio(full, none, "step_s_median")
            if rss and step:
                out.append({"summary": "recompute", "impl": impl, "config": "small", "passes": K,
                            "full_over_none_peak_rss": rss, "full_over_none_step_s": step})
    return out


def spread(s, nd=2):
    """'median [min-max]' of over_rounds() ('-' if None; the median alone for one round)."""
    if s is None:
        return "-"
    med = f"{s['median']:.{nd}f}"
    return med if s["rounds"] == 1 else f"{med} [{s['min']:.{nd}f}-{s['max']:.{nd}f}]"


def print_summary(records, rounds):
    print(f"\n== tokens/s per row (fullband / torch): median over {rounds} round(s) of each "
          "round's ratio [min-max]; tokens/s and RSS are medians ==")
    print(f"{'config':7s} {'K':>2s} {'recompute':9s} {'torch tok/s':>12s} {'fullband tok/s':>15s} "
          f"{'ratio':>19s} {'torch RSS MiB':>14s} {'fullband RSS MiB':>17s}")
    for r in (r for r in records if r["summary"] == "row"):
        print(f"{r['config']:7s} {r['passes']:2d} {r['recompute']:9s} "
              f"{fmt(r['torch_tokens_per_s'], 1):>12s} {fmt(r['fullband_tokens_per_s'], 1):>15s} "
              f"{spread(r['ratio']):>19s} {fmt(r['torch_peak_rss_mib'], 0):>14s} "
              f"{fmt(r['fullband_peak_rss_mib'], 0):>17s}")
    print("\n== K-pass step time / (K x one-pass step time), per round: median [min-max] ==")
    for r in (r for r in records if r["summary"] == "k_pass"):
        print(f"{r['impl']:9s} {r['config']:6s} K={r['passes']}: "
              f"{spread(r['step_over_k_one_pass_steps'], 3)}")
    print("\n== recompute full / none (small), per round: median [min-max] ==")
    for r in (r for r in records if r["summary"] == "recompute"):
        print(f"{r['impl']:9s} K={r['passes']}: peak RSS {spread(r['full_over_none_peak_rss'], 3)}"
              f"  step time {spread(r['full_over_none_step_s'], 3)}")


def env_sweep(a):
    """Which torch environment is fastest: each variant on K=1 rows, interleaved, best of R."""
    peak = a.peak_gflops or 1.0
    cfgs = [a.only] if a.only else ["tiny"]
    res = {}
    for rep in range(a.repeat):
        for name, ch in ENV_VARIANTS.items():
            for cfg in cfgs:
                r = run_json([PYTHON, TORCH_SCRIPT] + flags(cfg, 1, "none", a, peak),
                             torch_env(ch), f"torch {name}")
                if "error" in r:
                    print(r["error"], file=sys.stderr)
                    continue
                res.setdefault((name, cfg), []).append(r)
                print(json.dumps({"variant": name, **{k: r[k] for k in (
                    "config", "tokens_per_s", "step_s_median", "peak_rss_mib")},
                    "blas_core": r["blas"].get("core"), "env": r["env"]}), flush=True)
    print("\n== torch env sweep (K=1, recompute none; best of runs) ==")
    for cfg in cfgs:
        base = min((r["step_s_median"] for r in res.get(("best", cfg), [])), default=None)
        for name in ENV_VARIANTS:
            rs = res.get((name, cfg), [])
            if not rs:
                continue
            b = min(r["step_s_median"] for r in rs)
            med = statistics.median(r["step_s_median"] for r in rs)
            rel = f"{b / base:.3f}" if base else "-"
            print(f"{cfg:6s} {name:32s} best step {b:.4f} s  median of runs {med:.4f} s  "
                  f"vs best-env {rel}  peak RSS {min(r['peak_rss_mib'] for r in rs):.0f} MiB")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fullband", default=os.path.join(ROOT, "build", "bench", "train_step"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed steps (default 3: torch's heap needs ~3 steps at K=3 on small "
                         "before every page it reuses has been faulted in)")
    ap.add_argument("--only", choices=["tiny", "small"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peak-gflops", type=float, default=0.0,
                    help="default: torch.mm 2048^3, best of 10, measured once, given to both")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of the whole matrix; ratios are taken within a round and "
                         "reported as the median over rounds (with --env-sweep: runs per variant, "
                         "the fastest kept)")
    ap.add_argument("--torch-malloc", choices=sorted(MALLOC_CHOICES), default="keep",
                    help="glibc malloc settings of the torch runs: keep (fastest; freed memory is "
                         "kept, so peak RSS includes heap fragmentation), thp (RSS ~ live peak, "
                         "slower), default (glibc's own: every big tensor re-faults its pages)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-fullband", action="store_true")
    ap.add_argument("--env-sweep", action="store_true",
                    help="measure the torch environment variants instead of the matrix")
    ap.add_argument("--json-out", help="also write every JSON record to this file")
    a = ap.parse_args(argv)
    if a.env_sweep:
        env_sweep(a)
        return 0
    peak = a.peak_gflops or measure_peak(a.threads)
    print(json.dumps({"peak_gflops": round(peak, 1), "source": "flag" if a.peak_gflops else
                      "torch.mm 2048^3 best of 10 (torch best env)", "threads": a.threads}),
          flush=True)
    impls = []
    if not a.no_torch:
        impls.append("torch")
    if not a.no_fullband:
        if os.access(a.fullband, os.X_OK):
            impls.append("fullband")
        else:
            print(f"run_train_bench: {a.fullband} not found or not executable: skipping fullband",
                  file=sys.stderr)
    results = []
    for rd in range(a.repeat):
        order = impls if rd % 2 == 0 else impls[::-1]
        for cfg, K, rc in rows(a.only):
            for impl in order:
                if impl == "torch":
                    cmd = [PYTHON, TORCH_SCRIPT] + flags(cfg, K, rc, a, peak)
                    env = torch_env(MALLOC_CHOICES[a.torch_malloc])
                else:
                    cmd, env = [a.fullband] + flags(cfg, K, rc, a, peak), dict(os.environ)
                r = run_json(cmd, env, f"{impl} {cfg} K={K} {rc} round {rd}")
                if "error" in r:
                    print(r["error"], file=sys.stderr)
                    r.update(impl=impl, config=cfg, passes=K, recompute=rc)
                r["round"] = rd
                print(json.dumps(r), flush=True)
                results.append(r)
    if a.json_out:
        with open(a.json_out, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    summary = summarize(results, impls)
    for r in summary:
        print(json.dumps(r), flush=True)
    print_summary(summary, a.repeat)
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
