#!/usr/bin/env python3
"""Runs fullband's benchmarks and writes docs/PERF.md from their JSON results.

  bench/perf_report.py [--only NAME,...] [--quick]   run benchmarks; each writes
                                                      bench/results/NAME.json
  bench/perf_report.py --render                      rewrite docs/PERF.md from bench/results/
  bench/perf_report.py --check                       exit 1 if docs/PERF.md is not what
                                                      --render writes (the perf_page test)
  bench/perf_report.py --list                        the benchmarks, their commands and times

Every fact about a benchmark lives once, in BENCHES below: its commands (the full ones and the
--quick ones), the explanation and target printed above its tables, and the tables, which are
computed from the JSON it printed. A results file holds the machine it ran on (CPU, cores,
instruction sets, compiler, git commit, date, load average) and every JSON object each command
printed. Commands run from the repository root on the build in build/ (scripts/build.sh).

--quick runs small sizes and few repeats to check the whole pipeline; its results are marked
"quick" in the JSON and on the page, and are not the benchmarks' numbers.
"""
import argparse
import datetime
import difflib
import json
import os
import shlex
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
PAGE = os.path.join(ROOT, "docs/PERF.md")
# mpirun refuses to start as root without these; they change nothing else.
RUN_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
DASH = "—"


# ---- Formatting -------------------------------------------------------------------------------

def num(v, nd=1):
    """v with nd decimals and thousands separators; a dash for None."""
    return DASH if v is None else f"{v:,.{nd}f}"


def ratio(a, b, nd=2):
    return DASH if a is None or not b else num(a / b, nd)


def spread(med, lo=None, hi=None, nd=2):
    """'median [min–max]', or the median alone when there is no spread to show."""
    if med is None:
        return DASH
    if lo is None or hi is None or lo == hi:
        return num(med, nd)
    return f"{num(med, nd)} [{num(lo, nd)}–{num(hi, nd)}]"


def over_rounds(s, nd=2):
    """A {"median", "min", "max", "rounds"} record (bench/run_train_bench.py) as spread()."""
    return DASH if not s else spread(s["median"], s["min"], s["max"], nd)


@dataclass
class Table:
    header: List[str]
    rows: List[List[str]]
    caption: str = ""   # above the table
    footer: str = ""    # below it

    def markdown(self):
        lines = [wrap(self.caption), ""] if self.caption else []
        lines.append("| " + " | ".join(self.header) + " |")
        lines.append("|" + " --- |" * len(self.header))
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in self.rows]
        if self.footer:
            lines += ["", wrap(self.footer)]
        return "\n".join(lines)


# ---- Reading a result -------------------------------------------------------------------------

def records(result):
    """Every JSON object the result's commands printed."""
    return [r for run in result["runs"] for r in run["records"]]


def pick(recs, **match):
    return [r for r in recs if all(r.get(k) == v for k, v in match.items())]


def first(recs, **match):
    found = pick(recs, **match)
    return found[0] if found else {}


# ---- The benchmarks ---------------------------------------------------------------------------

@dataclass
class Run:
    label: str
    command: str                  # as documented on the page, run from the repository root
    quick: Optional[str] = None   # the --quick command; None: skipped in quick mode


@dataclass
class Bench:
    name: str                     # --only NAME, bench/results/NAME.json
    title: str                    # the page's section heading
    runs: List[Run]
    explain: str                  # what is measured and against what baseline
    tables: Callable              # result -> [Table]
    minutes: int                  # about how long the full commands take on 2 cores
    target: str = ""
    notes: str = ""               # standing evidence that explains the numbers
    needs: List[str] = field(default_factory=list)   # files the commands need
    prepare: Optional[List[str]] = None               # makes what `needs` lacks, if it can


def ops_tables(res):
    recs = records(res)
    fullband = pick(recs, bench="gemm", impl="fullband")
    gemm = [r for r in fullband if "baseline_dnnl_gflops" in r]  # NN, with the baselines
    trans = [r for r in fullband if "baseline_dnnl_gflops" not in r]
    nn = {r["m"]: r["gflops"] for r in gemm}
    tables = [Table(
        ["size (NN)", "fullband", "oneDNN", "OpenBLAS SkylakeX", "OpenBLAS as configured",
         "fullband ÷ best"],
        [[f"{r['m']}³", num(r["gflops"]), num(r["baseline_dnnl_gflops"]),
          num(r["baseline_openblas_skylakex_gflops"]), num(r["baseline_openblas_env_gflops"]),
          num(r["ratio_to_best"], 2)] for r in gemm],
        f"GEMM, fp32 GFLOP/s (medians); the backend is "
        f"`{first(recs, bench='machine').get('backend', '?')}`:")]
    if trans:
        tables.append(Table(
            ["transposes", "fullband GFLOP/s", "÷ NN"],
            [[f"{r['trans']} {r['m']}³", num(r["gflops"]), ratio(r["gflops"], nn.get(r["m"]))]
             for r in trans],
            "Every transpose pair, against the NN product of the same size:"))
    tables.append(Table(
        ["m × n × k", "fullband GFLOP/s", "oneDNN GFLOP/s", "speedup per round"],
        [[f"{r['m']} × {r['n']} × {r['k']:,}", num(r["gflops"]), num(r["baseline_dnnl_gflops"]),
          spread(r["speedup_median"], r["speedup_min"], r["speedup_max"])]
         for r in pick(recs, bench="gemm_long_k")],
        "The readout's long-K GEMM (dh = dlogits · E), alternating with oneDNN on the same "
        "buffers:"))
    tables.append(Table(
        ["mask", "B, T, H, Hkv, Dh", "fwd+bwd GFLOP/s", "backend GEMM GFLOP/s", "÷ GEMM"],
        [["causal" + (f", window {r['window']}" if r["window"] else ""),
          f"{r['B']}, {r['T']}, {r['H']}, {r['Hkv']}, {r['Dh']}", num(r["fwdbwd_gflops"]),
          num(r["gemm_gflops"]), num(r["ratio_to_gemm"], 2)]
         for r in pick(recs, bench="attention")],
        "Causal GQA attention, forward + backward:"))
    tables.append(Table(
        ["N × V", "fwd+bwd s", "effective GB/s", "copy GB/s", "÷ copy bandwidth"],
        [[f"{r['N']} × {r['V']:,}", num(r["fwdbwd_seconds_median"], 4), num(r["effective_gbs"]),
          num(r["copy_gbs"]), num(r["ratio_to_copy_bandwidth"], 2)]
         for r in pick(recs, bench="cross_entropy")],
        "Cross-entropy, forward + backward:"))
    return tables


def step_tables(res):
    rows = [r for r in records(res) if r.get("impl") == "fullband" and "tokens_per_s" in r]
    one = {(r["recompute"]): r for r in rows if r["passes"] == 1}
    base = {(r["passes"], r["recompute"]): r for r in rows}

    def baseline(r):  # (what, step ratio, RSS ratio)
        if r["recompute"] != "none":
            b = base.get((r["passes"], "none"))
            return ("`none`, same K", ratio(r["step_s_median"], b and b["step_s_median"]),
                    ratio(r["peak_rss_mib"], b and b["peak_rss_mib"]))
        if r["passes"] > 1:
            b = one.get("none")
            step = b and b["step_s_median"] * r["passes"]
            return (f"{r['passes']} × K = 1", ratio(r["step_s_median"], step, 3), DASH)
        return (DASH, DASH, DASH)

    body = []
    for r in rows:
        what, step, rss = baseline(r)
        body.append([r["config"], r["passes"], r["recompute"], num(r["tokens_per_s"]),
                     num(r["step_s_median"], 3), num(r["cpu_s_median"], 2),
                     num(r["peak_rss_mib"], 0), num(r["activation_mib"], 0), num(r["mfu"], 2),
                     what, step, rss])
    peaks = [r["peak_gflops"] for r in rows]
    return [Table(["config", "K", "recompute", "tokens/s", "step s", "CPU s / step",
                   "peak RSS MiB", "activations MiB", "MFU", "baseline", "step ÷ baseline",
                   "peak RSS ÷ baseline"], body,
                  footer=f"The sgemm rate each process measured (MFU's peak): "
                  f"{num(min(peaks, default=None))}–{num(max(peaks, default=None))} GFLOP/s.")]


def trace_tables(res, top=10):
    recs = records(res)
    step = first(recs, impl="fullband")
    peak = step.get("peak_gflops")
    threads = res["machine"]["cores"]
    shapes = [r for r in pick(recs, bench="gemm_trace") if not r.get("summary")]
    total = sum(r["seconds"] for r in shapes)
    body = []
    for r in shapes[:top]:
        is_peak = (r["m"], r["n"], r["k"]) == (2048, 2048, 2048) and not r["in_parallel"]
        what = "the sgemm peak (baseline)" if is_peak else (
            "one thread, in a parallel region" if r["in_parallel"] else "")
        own_peak = peak / threads if peak and r["in_parallel"] else peak
        body.append([f"{r['trans']} {r['m']:,} × {r['n']:,} × {r['k']:,} ({r['lda']:,}, "
                     f"{r['ldb']:,})", what, f"{r['calls']:,}", num(100 * r["seconds"] / total, 1),
                     num(r["gflops"]), ratio(r["gflops"], own_peak)])
    rest = shapes[top:]
    if rest:
        body.append([f"{len(rest)} other shapes", "", f"{sum(r['calls'] for r in rest):,}",
                     num(100 * sum(r["seconds"] for r in rest) / total, 1), "", ""])
    return [Table(["GEMM, m × n × k (lda, ldb)", "note", "calls", "% of GEMM time", "GFLOP/s",
                   "÷ sgemm peak"], body,
                  f"`train_step --config {step.get('config', '?')}`, sgemm peak "
                  f"{num(peak)} GFLOP/s on {threads} threads; the slowest shapes in total:")]


def torch_tables(res):
    recs = records(res)
    rows = pick(recs, summary="row")
    tables = [Table(
        ["config", "K", "recompute", "torch tok/s", "fullband tok/s",
         "fullband ÷ torch, per round", "MFU torch / fullband", "peak RSS MiB torch / fullband"],
        [[r["config"], r["passes"], r["recompute"], num(r["torch_tokens_per_s"]),
          num(r["fullband_tokens_per_s"]), over_rounds(r["ratio"]),
          f"{num(r['torch_mfu'], 2)} / {num(r['fullband_mfu'], 2)}",
          f"{num(r['torch_peak_rss_mib'], 0)} / {num(r['fullband_peak_rss_mib'], 0)}"]
         for r in rows],
        "Tokens/s, MFU and RSS are medians over rounds; the ratio is taken per round.")]
    kpass = pick(recs, summary="k_pass")
    if kpass:
        tables.append(Table(
            ["impl", "config", "K", "K-pass step ÷ (K × one-pass step), per round"],
            [[r["impl"], r["config"], r["passes"], over_rounds(r["step_over_k_one_pass_steps"], 3)]
             for r in kpass]))
    recompute = pick(recs, summary="recompute")
    if recompute:
        tables.append(Table(
            ["impl", "config", "K", "peak RSS full ÷ none", "step time full ÷ none"],
            [[r["impl"], r["config"], r["passes"], over_rounds(r["full_over_none_peak_rss"], 3),
              over_rounds(r["full_over_none_step_s"], 3)] for r in recompute]))
    peaks = sorted({r["peak_gflops"] for r in recs if "source" in r and "peak_gflops" in r})
    if peaks:
        tables[0].caption += (" MFU is against `torch.mm` 2048³ measured at the start of each "
                              f"command: {', '.join(num(p) for p in peaks)} GFLOP/s.")
    return tables


def tokenize_tables(res):
    recs = records(res)
    corpora = [r for r in pick(recs, summary=True) if "corpus" in r]
    load = first(recs, summary=True, load=True)
    return [
        Table(["corpus", "MB", "fullband MB/s", "tiktoken MB/s", "ratio",
               "CPU-time MB/s fullband / tiktoken", "CPU-time ratio", "fullband Mtokens/s"],
              [[r["corpus"], num(r["bytes"] / 1e6), num(r["fullband_mb_per_s"]),
                num(r["tiktoken_mb_per_s"], 2), num(r["ratio"]),
                f"{num(r['fullband_cpu_mb_per_s'])} / {num(r['tiktoken_cpu_mb_per_s'], 2)}",
                num(r["cpu_ratio"]), num(r["fullband_mtokens_per_s"], 2)] for r in corpora],
              "Encoding, medians over rounds:"),
        Table(["", "fullband ms", "tiktoken ms", "tiktoken ÷ fullband"],
              [["loading the ranks", num(1e3 * load.get("fullband_seconds", 0)),
                num(1e3 * load.get("tiktoken_seconds", 0)),
                ratio(load.get("tiktoken_seconds"), load.get("fullband_seconds"))]] if load else [],
              "Loading:"),
    ]


def reader_tables(res):
    body = []
    for run in res["runs"]:
        recs = run["records"]
        store = first(recs, impl="rocksdb_store_prefetch")
        flat = first(recs, impl="mmap_flat_file")
        s = first(recs, summary=True)
        body.append([store.get("threads"), num(store.get("tokens_per_s", 0) / 1e6),
                     num(flat.get("tokens_per_s", 0) / 1e6),
                     spread(s.get("store_over_mmap"), s.get("store_over_mmap_min"),
                            s.get("store_over_mmap_max"), 3)])
    return [Table(["reading threads", "store M tokens/s", "mmap M tokens/s",
                   "store ÷ mmap, per round"], body)]


def ingest_tables(res):
    body = []
    for run in res["runs"]:
        recs = run["records"]
        one = first(recs, impl="encode_1_thread")
        bound = first(recs, impl="encode_only")
        ing = first(recs, impl="ingest")
        s = first(recs, summary=True)
        name = os.path.basename(one.get("input", "?")).split(".")[0]
        copies = one.get("copies", 1)
        body.append([name + (f" × {copies}" if copies > 1 else ""), num(one.get("mb")),
                     num(one.get("mb_per_s")), num(ing.get("mb_per_s")),
                     spread(s.get("ingest_over_encode"), s.get("ingest_over_encode_min"),
                            s.get("ingest_over_encode_max")),
                     num(s.get("encode_only_over_encode"), 2),
                     f"{num(ing.get('cpu_seconds_median'), 3)} / "
                     f"{num(bound.get('cpu_seconds_median'), 3)}"])
    return [Table(["input", "MB", "encode, 1 thread MB/s", "ingest MB/s",
                   "ingest ÷ encode, per round", "encode-only bound ÷ encode",
                   "CPU s: ingest / bound"], body)]


def page_tables(res):
    recs = records(res)
    s = first(recs, summary=True)
    return [Table(["pages", "MB", "first round ms", "later rounds ms (median)", "µs per 4 KB"],
                  [[r["pages"], r["mb"], num(r["first_ms"], 2), num(r["later_ms_median"], 2),
                    num(r["us_per_4k_page"], 3)] for r in pick(recs, bench="page_touch")
                   if not r.get("summary")],
                  footer=f"4 KB pages ÷ 2 MB pages, later rounds: "
                  f"{num(s.get('small_over_huge'))}×.")]


def parallel_tables(res):
    recs = pick(records(res), bench="parallel")
    layouts = [k[:-len("_ratio")] for k in (recs[0] if recs else {}) if k.endswith("_ratio")]
    header = ["model", "K", "one rank, 2 threads tok/s"]
    for name in layouts:
        header += [f"{name} tok/s", f"{name} ÷ one rank"]
    header += ["dp2: gradient bytes reduced during backward", "dp2: wait after backward s"]
    body = []
    for r in recs:
        row = [r["model"], r["passes"], num(r["one_rank_2_threads_tokens_per_s"])]
        for name in layouts:
            row += [num(r.get(f"{name}_tokens_per_s")), num(r.get(f"{name}_ratio"), 3)]
        hidden = r.get("dp2_hidden_fraction")
        row += [DASH if hidden is None else f"{100 * hidden:.0f}%",
                num(r.get("dp2_exposed_reduction_s"), 3)]
        body.append(row)
    return [Table(header, body)]


def allreduce_tables(res):
    return [Table(["buffer MiB", "ranks", "MpiCommunicator GB/s", "MPI_Allreduce GB/s",
                   "ratio"],
                  [[r["mb"], r["ranks"], num(r["communicator_gbps"], 2), num(r["mpi_gbps"], 2),
                    num(r["ratio"], 2)] for r in pick(records(res), bench="allreduce")])]


def checkpoint_tables(res):
    r = first(records(res), bench="checkpoint")
    if not r:
        return []
    return [Table(
        ["measure", "fullband", "baseline (same rounds)", "ratio", "target"],
        [["save: shards written and fsynced, manifest, rename", f"{num(r['save_mb_s'])} MB/s",
          f"`dd bs=4M conv=fdatasync`, same bytes and directory: {num(r['dd_fdatasync_mb_s'])} "
          "MB/s", spread(r["save_vs_dd"], r["save_vs_dd_min"], r["save_vs_dd_max"]), "≥ 0.8"],
         ["stall of a step for an asynchronous save", f"{num(1e3 * r['stall_s'])} ms",
          f"one `memcpy` of the rank's state: {num(1e3 * r['memcpy_s'])} ms",
          num(r["stall_vs_memcpy"], 2), "≤ 1.5"],
         ["the same stall against the model's K = 1 step", f"{num(1e3 * r['stall_s'])} ms",
          f"step: {num(r['step_s'], 2)} s", f"{num(100 * r['stall_of_step'], 1)}%", "≤ 5%"],
         ["load (same layout, files in the page cache)", f"{num(r['load_mb_s'])} MB/s", "", "",
          ""],
         ["reshard load: written by DP2 + ZeRO-1, loaded at one rank",
          f"{num(r['reshard_load_s'], 3)} s",
          f"same-layout load: {num(r['same_layout_load_s'], 3)} s", num(r["reshard_vs_same"], 2),
          ""]],
        f"{num(r['state_mb'])} MB of state, {r['threads']} threads, medians over {r['reps']} "
        "rounds:")]


def coordinator_tables(res):
    r = first(records(res), bench="coordinator")
    if not r:
        return []
    rpcs = [("baseline: gRPC health check", r["baseline_health_check"]),
            ("LeaseBatches (16 steps, already leased)", r["lease_batches"]),
            ("ReportStep, durable before acknowledged", r["report_step"])]
    base_rate = r["baseline_health_check"]["rpc_per_s"]
    hb, traffic, failure = r["heartbeats"], r["groups_traffic"], r["failure"]
    rep = r["report_step"]
    return [
        Table(["run", "RPC/s", "÷ baseline", "p50 ms", "p99 ms", "process CPU µs / RPC"],
              [[name, num(x["rpc_per_s"], 0), ratio(x["rpc_per_s"], base_rate),
                num(x["p50_ms"], 2), num(x["p99_ms"], 2), num(x["process_cpu_us_per_rpc"])]
               for name, x in rpcs],
              f"{rep['in_flight']} calls in flight on {rep['channels']} connections, "
              f"{num(rep['seconds'])} s each; ReportStep: "
              f"{rep['synced_writes']:,} synced writes, {num(rep['reports_per_sync'])} reports "
              f"per write, {rep['acknowledged']:,} acknowledged and {rep['counted']:,} counted."),
        Table(["measure", "result", "target"],
              [[f"heartbeats of {hb['groups']:,} groups every {num(hb['interval_s'])} s: "
                "process CPU", f"{num(hb['process_cpu_percent_of_one_core'], 2)}% of one core "
                f"(idle: {num(hb['idle_process_cpu_percent'], 2)}%)", "< 10%"],
               [f"{traffic['groups']:,} groups heartbeating, leasing and reporting",
                f"{traffic['reports_acknowledged']:,} acknowledged, "
                f"{traffic['reports_counted']:,} counted, {traffic['jobs_where_counted_differs']}"
                f" ledgers different; p99 {num(traffic['p99_ms'], 2)} ms", "all counted"],
               [f"relaunch after a missed heartbeat deadline ({num(failure['heartbeat_timeout_s'])}"
                f" s, tick {num(failure['tick_s'], 2)} s)",
                f"{num(failure['relaunch_after_timeout_s'], 3)} s after the deadline", "≤ 1 s"]])]


RECOVERY_PHASES = [
    ("detection: kill → the coordinator marks the job RESTARTING", "detection_s"),
    ("back-off (as configured)", "backoff_s"),
    ("launch: mpirun, process start, MPI init → rank 0 registers", "launch_s"),
    ("load: the checkpoint restored", "load_s"),
    ("first step counted", "first_step_s"),
    ("**total**", "total_s"),
    ("total without the back-off", "total_without_backoff_s"),
]


def recovery_tables(res):
    r = first(records(res), bench="recovery")
    if not r:
        return []
    kills = r["median_of_kills"]
    hangs = [t for t in r["trials"] if t["fault"] == "hang"]
    body = [[name, num(kills[key], 3), num(hangs[0][key], 3) if hangs else DASH]
            for name, key in RECOVERY_PHASES]
    body.append(["baseline, same run: a cold start (submit → first counted step)",
                 num(r["baseline_cold_start_s"], 3), ""])
    body.append(["steps lost", ", ".join(str(t["steps_lost"]) for t in r["trials"]
                                         if t["fault"] == "kill"),
                 ", ".join(str(t["steps_lost"]) for t in hangs)])
    setup = r["setup"]
    return [Table(["phase", "kill -9 of rank 1, s (median)", "hang of rank 0, s"], body,
                  f"{setup['layout']}, {setup['steps']} steps of {num(setup['step_s'], 3)} s, "
                  f"a checkpoint every {setup['checkpoint_every']} steps, back-off "
                  f"{num(setup['backoff_s'])} s, heartbeat timeout "
                  f"{num(setup['heartbeat_timeout_s'])} s:")]


CORPUS = ["build/demo/corpus/linux-doc.jsonl", "build/demo/corpus/brown.jsonl"]
NPM = ".deps/npm/node_modules/tiktoken"

BENCHES = [
    Bench(
        "ops_bench", "Op library (`ops_bench`)",
        [Run("all", "build/bench/ops_bench --threads 2",
             "build/bench/ops_bench --threads 2 --quick")],
        explain="The CPU backend's GEMM, attention and cross-entropy, each against a baseline in "
        "the same process. GEMM: fp32 GFLOP/s against oneDNN's `dnnl_sgemm` called directly, "
        "OpenBLAS as the environment configures it (`OPENBLAS_CORETYPE` as set) and OpenBLAS told "
        "to use its AVX-512 kernels (`OPENBLAS_CORETYPE=SkylakeX`, in a child process). The "
        "backend calls oneDNN, whose JIT kernels follow CPUID, except for products with a long "
        "inner dimension, which run on its own kernel (Note [Long-K GEMM] in "
        "`ops/cpu/simd_kernels.cc`): *small*'s readout dh GEMM is timed against `dnnl_sgemm` on "
        "the same buffers, alternating, one ratio per round. Attention counts only the useful "
        "causal FLOPs (2 GEMMs forward, 4 backward; the backward's recomputation of QKᵀ not "
        "counted) and is compared with the backend's own 2048³ GEMM rate. Cross-entropy reads "
        "the logits three times (maximum and Σexp forward, the gradient backward); its effective "
        "bandwidth is compared with a copy of the same buffer.",
        target="GEMM ≥ 0.85 of the best baseline at every size; causal attention ≥ 0.5 of the "
        "GEMM rate.",
        tables=ops_tables, minutes=2, needs=["build/bench/ops_bench"]),
    Bench(
        "train_step", "Training step (`train_step`)",
        [Run(f"K{k} {rc}",
             f"build/bench/train_step --config small --passes {k} --recompute {rc} --steps 3 "
             "--warmup 1",
             f"build/bench/train_step --config tiny --passes {k} --recompute {rc} --steps 2 "
             "--warmup 1")
         for k, rc in [(1, "none"), (2, "none"), (3, "none"), (1, "full"), (3, "full")]],
        explain="One optimizer step of *small* (V = 100,352, D = 512, L = 8, H = 8, T = 512, "
        "B = 4): K passes forward, backward through every pass, AdamW; one process per row, so "
        "peak RSS is the row's. The baselines are rows of the same run: for K > 1 the one-pass "
        "step (K passes are K times the work, so 1.0 means no overhead), for `--recompute full` "
        "the same K without recomputation. MFU is model FLOPs per second over the backend's "
        "2048³ sgemm rate, measured in the same process after the steps. Below the activations "
        "lies a fixed floor: the 77.6 M parameters' four fp32 arenas (parameters, gradients, two "
        "AdamW moments: 1,185 MiB) and the process itself.",
        target="K-pass step ≤ 1.03 × K one-pass steps; `full` at K = 3: peak RSS ≤ 0.45 of "
        "`none` at ≤ 1.3× its step time.",
        tables=step_tables, minutes=8, needs=["build/bench/train_step"]),
    Bench(
        "gemm_trace", "Where the GEMM time goes (`gemm_trace`)",
        [Run("all",
             "LD_PRELOAD=build/bench/libgemm_trace.so build/bench/train_step --config small "
             "--steps 2 --warmup 1",
             "LD_PRELOAD=build/bench/libgemm_trace.so build/bench/train_step --config tiny "
             "--steps 1 --warmup 1")],
        explain="`build/bench/libgemm_trace.so`, preloaded into `train_step`, times every "
        "`dnnl_sgemm` call of the process shape by shape (the steps, and the 2048³ products that "
        "measure the sgemm peak). The baseline is that peak, from the same process. Calls made "
        "inside a parallel region (attention's per-head products) run on one thread each, so "
        "they are compared with the peak divided by the threads. The long-K kernel's dh GEMM is "
        "not a `dnnl_sgemm` call and does not appear (the op library's table has it).",
        tables=trace_tables, minutes=1,
        needs=["build/bench/libgemm_trace.so", "build/bench/train_step"]),
    Bench(
        "run_train_bench", "Against PyTorch (`run_train_bench.py`)",
        [Run("tiny", "bench/run_train_bench.py --only tiny --repeat 5",
             "bench/run_train_bench.py --only tiny --steps 2 --warmup 1"),
         Run("small", "bench/run_train_bench.py --only small --repeat 2")],
        explain="fullband's training step (`train_step`) against the same model and step in "
        "float32 PyTorch 1.13 (`bench/torch_train_step.py`), written the way a PyTorch user "
        "makes it fast on CPU (fused QKV/gate and W1/W3 projections, masks inside `baddbmm`, "
        "full-logits cross-entropy) and run with its best settings on the machine (OpenBLAS's "
        "own kernel choice, `GOMP_SPINCOUNT=0`, ATen's AVX-512 kernels where the CPU has them, "
        "glibc malloc keeping freed memory: with glibc's defaults every large tensor faults its "
        "pages in again, which made PyTorch several times slower on these virtual machines). "
        "`torch_train_step.py --selfcheck` checks its float32 losses and gradients against the "
        "float64 reference. Every row is its own process; torch and fullband run back to back "
        "on each row, which goes first alternating by round, and every ratio is taken within a "
        "round.",
        target="tiny ≥ 1.5× PyTorch's tokens/s, small ≥ 1.3×; K-pass step ≤ 1.03 × K one-pass "
        "steps.",
        notes="On *small* nearly all of both steps is GEMMs (see `gemm_trace`), and PyTorch's "
        "`none` rows have reached 0.7–0.8 of the measured sgemm peak on the machines tried; "
        "1.3× PyTorch there would need fullband to run above the machine's sgemm rate.",
        tables=torch_tables, minutes=50,
        needs=["build/bench/train_step", "bench/torch_train_step.py",
               "tests/reference/model_ref.py"]),
    Bench(
        "run_tokenize_bench", "Tokenizer (`run_tokenize_bench.py`)",
        [Run("all", "bench/run_tokenize_bench.py --rounds 3 --reps 5",
             "bench/run_tokenize_bench.py --rounds 1 --reps 1")],
        explain="Single-thread encoding with the Phi-4 tokenizer (`build/bench/tokenize_bench`) "
        "against npm `tiktoken@1.0.22`'s WASM build (`bench/tiktoken_bench.mjs`, "
        "`encode_ordinary`) on the same bytes, the two programs alternating by round; the "
        "driver stops if their token counts differ. The corpora come from "
        "`scripts/tokenizer_corpus.mjs`: *brown*, the Brown corpus without its tags (English "
        "prose), and *linux-doc*, the reST sources of Debian's `linux-doc-6.1` (documentation "
        "with code, tables and CJK translations). MB = 10⁶ input bytes; tiktoken's time excludes "
        "decoding the bytes to a JS string, fullband's includes UTF-8 validation. CPU-time rates "
        "(each process's own CPU seconds) move less than wall-clock ones when other work shares "
        "the cores. Loading is `Tokenizer::Load` (read, SHA-256, parse, build the tables) "
        "against tiktoken's `get_encoding`.",
        target="≥ 2× tiktoken's single-thread MB/s.",
        tables=tokenize_tables, minutes=4, needs=["build/bench/tokenize_bench", NPM]),
    Bench(
        "reader_bench", "Token store reader (`reader_bench`)",
        [Run(f"threads {t}", f"build/bench/reader_bench --threads {t}",
             f"build/bench/reader_bench --threads {t} --sequences 4000 --reps 3") for t in (1, 2)],
        explain="40,000 records of 513 random ids (82 MB) written once to a flat file and to a "
        "token store; then epochs of batches of 32 in the sampler's random order, copied out of "
        "the memory-mapped flat file (the baseline: the least a reader can do) or read through "
        "`BatchReader` with prefetch 8 from the store (RocksDB point reads, the record checksum "
        "and the id range check), both from the page cache, an epoch of each per round, 15 "
        "rounds. How the store is tuned for this: Note [Store tuning] in "
        "`dataloader/token_store.cc`.",
        target="store ≥ 0.25 of mmap with two reading threads, and ≥ 1,000× the tokens/s "
        "training consumes (compare the training step's tokens/s).",
        tables=reader_tables, minutes=1, needs=["build/bench/reader_bench"]),
    Bench(
        "ingest_bench", "Ingest (`ingest_bench`)",
        [Run("linux-doc", f"build/bench/ingest_bench --input {CORPUS[0]} --reps 11",
             f"build/bench/ingest_bench --input {CORPUS[0]} --reps 1"),
         Run("linux-doc x4", f"build/bench/ingest_bench --input {CORPUS[0]} --reps 5 --copies 4"),
         Run("brown", f"build/bench/ingest_bench --input {CORPUS[1]} --reps 15",
             f"build/bench/ingest_bench --input {CORPUS[1]} --reps 1")],
        explain="`fullband ingest` of a JSONL file into a new store on 2 threads (reading, JSON "
        "parsing, tokenizing, packing, the table writes and the synced commit) against encoding "
        "the same documents on one thread (`Tokenizer::Encode` only), and against a bound: the "
        "documents dealt to 2 threads that only encode. The three run interleaved; each ratio is "
        "the median over rounds of the round's ratio. The process's CPU seconds tell cores left "
        "idle from work that grew. The inputs are the README demo's corpus "
        "(`scripts/demo/make_corpus.py`).",
        target="ingest ≥ 1.6× single-thread encoding.",
        notes="The bound is the machine's own two-thread scaling, and on the 2-vCPU virtual "
        "machines measured so far it moved between 1.2× and 2.1× from run to run. The two vCPUs "
        "are separate cores (an ALU loop runs as fast on two threads as on one), but once their "
        "random accesses cover more than 8–16 MB each slows the other 2–4× (a pointer chase: the "
        "L3 is shared with work outside the guest), and the tokenizer's tables (≈ 9 MB) sit at "
        "that edge. Read the ingest ratio against the bound of the same run.",
        tables=ingest_tables, minutes=2, needs=["build/bench/ingest_bench"] + CORPUS,
        prepare=["scripts/demo/make_corpus.py", "build/demo/corpus"]),
    Bench(
        "page_touch_bench", "Page faults (`page_touch_bench`)",
        [Run("all", "build/bench/page_touch_bench --mb 64 --rounds 9",
             "build/bench/page_touch_bench --mb 16 --rounds 3")],
        explain="The first touch of fresh memory in 4 KB pages against 2 MB transparent huge "
        "pages (`common/allocators.h`), in the same run: each round allocates the buffer, writes "
        "one byte per 4 KB page and frees it. The first round also pays for memory the process "
        "never had. Where the host shadows the guest's page tables a 4 KB fault is expensive, "
        "which is why the arenas, the tokenizer's tables and ingest's buffers live in huge pages "
        "(Note [Ingest memory] in `dataloader/ingest.cc`).",
        tables=page_tables, minutes=1, needs=["build/bench/page_touch_bench"]),
    Bench(
        "run_parallel_bench", "Data and tensor parallelism (`run_parallel_bench.py`)",
        [Run("all", "bench/run_parallel_bench.py --steps 5 --rounds 2 --no-allreduce",
             "bench/run_parallel_bench.py --model tiny --steps 3 --rounds 1 --no-allreduce")],
        explain="`fullband train` on *small* at K = 1 and 3, as DP2 (`mpirun -np 2`, one thread "
        "per rank), DP2 with ZeRO-1 and TP2 (`parallel.tp: 2`), against the baseline of one "
        "rank with 2 threads, interleaved in the same run; medians of the steps after the first "
        "two. For DP2, the share of the gradient bytes reduced while backward still ran, and "
        "the wait for the rest after it. The tied embedding is most of the gradient bytes and is "
        "final only at the end of backward (its input-embedding part is added last), so its "
        "all-reduce cannot overlap; without ZeRO-1 both ranks run AdamW over every parameter on "
        "one thread each. TP2 repeats on each rank the work it does not split: the RMSNorms, "
        "the residual stream, the feedback fusion and AdamW over replicated parameters "
        "(docs/PARALLEL.md).",
        tables=parallel_tables, minutes=25, needs=["build/cli/fullband"]),
    Bench(
        "allreduce_bench", "All-reduce (`allreduce_bench`)",
        [Run("all", "mpirun --oversubscribe --bind-to none -np 2 build/bench/allreduce_bench "
             "--mb 4,296 --reps 7",
             "mpirun --oversubscribe --bind-to none -np 2 build/bench/allreduce_bench --mb 4 "
             "--reps 3")],
        explain="Bus bandwidth, 2·(n−1)/n · bytes / time, of `MpiCommunicator` "
        "(`comm/mpi_communicator.h`) against a plain `MPI_Allreduce` of the same buffer on "
        "the same ranks, the two interleaved, medians: 4 MiB is one gradient bucket, 296 MiB all "
        "of *small*'s gradients.",
        tables=allreduce_tables, minutes=1, needs=["build/bench/allreduce_bench"]),
    Bench(
        "checkpoint_bench", "Checkpoints (`checkpoint_bench`)",
        [Run("all", "build/bench/checkpoint_bench --reps 7 --dir build/checkpoint_bench.d",
             "build/bench/checkpoint_bench --reps 1 --dir build/checkpoint_bench.d")],
        explain="Sharded checkpoints of the README demo's model (`scripts/demo/train.yaml`: "
        "V = 100,352, D = 256, L = 4; 26.5 M parameters, so 345 MB of parameters and AdamW "
        "moments), written to the build directory's disk; each figure against its baseline in "
        "the same round, medians over the rounds after a warm-up round. The save writes every "
        "shard and fsyncs it; `dd` of the same bytes into the same directory is what the disk "
        "gives a plain sequential write. Both swing with what ran before them on a virtual "
        "disk, so the save ratio is meaningful only as the median over rounds.",
        tables=checkpoint_tables, minutes=3, needs=["build/bench/checkpoint_bench"]),
    Bench(
        "coordinator_bench", "Coordinator (`coordinator_bench`)",
        [Run("all",
             "build/bench/coordinator_bench --seconds 10 --groups 1000 --heartbeat-interval 10",
             "build/bench/coordinator_bench --seconds 2 --groups 100 --heartbeat-interval 1 "
             "--idle-seconds 1")],
        explain="The coordinator service over TLS with bearer tokens on loopback, driven by "
        "asynchronous clients in the same process (client and server share the cores). "
        "ReportStep is acknowledged only after its synced RocksDB write (group commit: one "
        "synced batch per round of queued reports). The baseline is the same server's gRPC "
        "health check at the same concurrency (TLS, HTTP/2, no auth header, no store), in the "
        "same run; process CPU per RPC (client and server) moves less with other load than the "
        "rates do.",
        target="≥ 12,000 ReportStep/s with p99 < 20 ms; ≥ 25,000 LeaseBatches/s with p99 < "
        "10 ms; the rest in the second table.",
        tables=coordinator_tables, minutes=2, needs=["build/bench/coordinator_bench"]),
    Bench(
        "run_recovery_bench", "Recovery from a failed rank (`run_recovery_bench.py`)",
        [Run("all", "bench/run_recovery_bench.py", "bench/run_recovery_bench.py --kills 1")],
        explain="A local coordinator runs one DP2 + ZeRO-1 job; rank 1 is killed with SIGKILL "
        "several times, then rank 0 is stopped with SIGSTOP (a hang, found by the heartbeat "
        "deadline). Each recovery is timed from the fault to the first step the new attempt "
        "gets counted, from the UTC times in the coordinator's and the worker's logs and the "
        "job's history. The baseline is a cold start of the same job in the same run. Work "
        "lost can exceed the checkpoint interval by the steps a save takes to commit: it is "
        "written in the background and committed at a later step boundary.",
        tables=recovery_tables, minutes=1, needs=["build/cli/fullband"]),
]
BY_NAME = {b.name: b for b in BENCHES}


# ---- Running ----------------------------------------------------------------------------------

def sh(*cmd):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True).stdout.strip()


def cpuinfo():
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    return info


def compiler():
    cache = os.path.join(ROOT, "build", "CMakeCache.txt")
    if not os.path.exists(cache):
        return "unknown"
    with open(cache) as f:
        path = next((l.split("=", 1)[1].strip() for l in f
                     if l.startswith("CMAKE_CXX_COMPILER:")), "")
    return sh(path, "--version").splitlines()[0] if path else "unknown"


def machine():
    info = cpuinfo()
    flags = set(info.get("flags", "").split())
    with open("/proc/meminfo") as f:
        mem_kib = int(next(l for l in f if l.startswith("MemTotal")).split()[1])
    outside = [":!bench/results", ":!docs/PERF.md"]
    dirty = sh("git", "status", "--porcelain", "--untracked-files=no", "--", ".", *outside)
    return {
        "cpu": info.get("model name", "unknown"),
        "cpu_family": info.get("cpu family"), "cpu_model": info.get("model"),
        "cores": os.cpu_count(),
        "isa": [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl") if f in flags],
        "memory_gib": round(mem_kib / 2**20, 1),
        "compiler": compiler(),
        "commit": sh("git", "rev-parse", "--short=12", "HEAD"),
        "uncommitted_changes": bool(dirty),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
    }


def json_objects(text):
    """Every JSON object in text that starts at the beginning of a line (one per line, or
    one spread over several lines)."""
    decoder, found, i = json.JSONDecoder(), [], 0
    while (i := text.find("{", i)) != -1:
        if i == 0 or text[i - 1] == "\n":
            try:
                obj, i = decoder.raw_decode(text, i)
                found.append(obj)
                continue
            except ValueError:
                pass
        i += 1
    return found


def run_command(command):
    """Runs one documented command; returns (seconds, records) or raises RuntimeError."""
    words = shlex.split(command)
    env = dict(os.environ, **RUN_ENV)
    while "=" in words[0] and not words[0].startswith(("/", ".")):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    t0 = time.monotonic()
    try:
        p = subprocess.run(words, cwd=ROOT, env=env, capture_output=True, text=True)
    except OSError as e:
        raise RuntimeError(f"`{command}`: {e}") from e
    seconds = round(time.monotonic() - t0, 1)
    found = json_objects(p.stdout) + json_objects(p.stderr)
    if p.returncode != 0 or not found:
        tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-8:])
        raise RuntimeError(f"`{command}` exited {p.returncode} with {len(found)} JSON "
                           f"object(s):\n{tail}")
    return seconds, found


def missing(bench):
    return [p for p in bench.needs if not os.path.exists(os.path.join(ROOT, p))]


def prepare(bench):
    if missing(bench) and bench.prepare:
        script, *args = bench.prepare
        subprocess.run([sys.executable, os.path.join(ROOT, script), *args], cwd=ROOT, check=True)
    lacking = missing(bench)
    if lacking:
        raise RuntimeError(f"missing {', '.join(lacking)} (scripts/build.sh builds the programs, "
                           "scripts/fetch_deps.sh fetches the npm packages)")


def run_bench(bench, quick):
    prepare(bench)
    result = {"bench": bench.name, "quick": quick, "machine": machine(),
              "load_average_before": round(os.getloadavg()[0], 2), "runs": []}
    for run in bench.runs:
        command = run.quick if quick else run.command
        if command is None:
            continue
        print(f"{bench.name} [{run.label}]: {command}", file=sys.stderr, flush=True)
        seconds, found = run_command(command)
        print(f"  {seconds} s, {len(found)} JSON object(s)", file=sys.stderr, flush=True)
        result["runs"].append({"label": run.label, "command": command, "seconds": seconds,
                               "records": found})
    result["load_average_after"] = round(os.getloadavg()[0], 2)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, bench.name + ".json"), "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")


# ---- Rendering --------------------------------------------------------------------------------

INTRO = """\
# Performance

This page is generated by `bench/perf_report.py --render` from the JSON results in
`bench/results/`; the `perf_page` test fails when the two disagree. The benchmarks' commands,
tables, explanations and targets are defined once, in that script, and the numbers' history is
in git.

Every benchmark measures fullband and a **baseline in the same run**: the same machine, seconds
or minutes apart, mostly interleaved round by round, and each table quotes their ratio. On the
shared 2-core virtual machines these run on, absolute rates move by up to 2× between runs (other
work, a host's shared caches); a ratio taken within one round cancels most of that out. Where a
ratio reads "median [min–max]" it was taken per round and the median is over rounds. Compare
absolute numbers only within one section.

To rerun a benchmark after `scripts/build.sh`, then regenerate this page:

```
bench/perf_report.py --only ops_bench
bench/perf_report.py --render
```

Without `--only` it runs them all (about {hours} hours on 2 cores). `--quick` runs small sizes
and few repeats to check the pipeline; a section holding such results says so, and its numbers
are not the benchmark's.
"""


def wrap(text):
    return textwrap.fill(text, 100, break_long_words=False, break_on_hyphens=False)


def machine_line(res):
    m = res["machine"]
    isa = ", ".join(f.upper().replace("AVX512", "AVX-512") for f in m["isa"])
    if "avx512f" not in m["isa"]:
        isa += (", " if isa else "") + "no AVX-512"
    commit = m["commit"] + (" with uncommitted changes" if m["uncommitted_changes"] else "")
    coretype = f", `OPENBLAS_CORETYPE={m['openblas_coretype']}`" if m["openblas_coretype"] else ""
    seconds = sum(run["seconds"] for run in res["runs"])
    return (f"{m['cpu']} (family {m['cpu_family']}, model {m['cpu_model']}; {isa}), "
            f"{m['cores']} cores, {m['memory_gib']} GiB{coretype}; compiler {m['compiler']}; "
            f"commit {commit}; {m['date']}; 1-minute load average {res['load_average_before']} "
            f"before, {res['load_average_after']} after; {seconds:,.0f} s.")


def section(bench, res):
    out = [f"## {bench.title}", "", wrap(bench.explain), ""]
    if bench.target:
        out += [wrap(f"**Target:** {bench.target}"), ""]
    out += ["```"] + [run.command for run in bench.runs] + ["```", ""]
    out += [f"Full run: about {bench.minutes} min.", ""]
    if res is None:
        out.append(f"No results yet (`bench/results/{bench.name}.json`).")
        return "\n".join(out)
    out += [wrap(f"Measured on: {machine_line(res)}"), ""]
    if res["quick"]:
        quick = [run["command"] for run in res["runs"]]
        out += [wrap("**Quick run, not this benchmark's numbers:** the results below come from "
                     "small sizes and few repeats, to check the pipeline:"),
                "", "```", *quick, "```", ""]
    for table in bench.tables(res):
        out += [table.markdown(), ""]
    if bench.notes:
        out += [wrap(bench.notes), ""]
    return "\n".join(out).rstrip()


def load_result(name):
    path = os.path.join(RESULTS, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def render():
    hours = sum(b.minutes for b in BENCHES) / 60
    parts = [INTRO.replace("{hours}", f"{hours:.1f}")]
    results = {b.name: load_result(b.name) for b in BENCHES}
    quick = [n for n, r in results.items() if r and r["quick"]]
    if quick:
        parts.append(wrap(f"**{len(quick)} of the {len(BENCHES)} sections below hold quick-run "
                          "results** (marked in each); rerun them without `--quick` on a quiet "
                          "machine for the real numbers.") + "\n")
    for b in BENCHES:
        parts.append(section(b, results[b.name]) + "\n")
    return "\n".join(parts)


# ---- Main -------------------------------------------------------------------------------------

def check():
    with open(PAGE, encoding="utf-8") as f:
        have = f.read()
    want = render()
    if have == want:
        print("docs/PERF.md is what bench/perf_report.py --render writes")
        return 0
    diff = difflib.unified_diff(have.splitlines(), want.splitlines(), "docs/PERF.md",
                                "--render", lineterm="", n=1)
    print("\n".join(list(diff)[:60]))
    print("docs/PERF.md differs from the results: run bench/perf_report.py --render")
    return 1


def list_benches():
    for b in BENCHES:
        print(f"{b.name} (about {b.minutes} min)")
        for run in b.runs:
            print(f"  {run.command}\n    quick: {run.quick or '(skipped)'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated benchmark names (--list shows them)")
    ap.add_argument("--quick", action="store_true", help="small sizes, to check the pipeline")
    ap.add_argument("--render", action="store_true", help="write docs/PERF.md from the results")
    ap.add_argument("--check", action="store_true", help="exit 1 unless docs/PERF.md is current")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        return list_benches()
    if a.check:
        return check()
    if a.render:
        with open(PAGE, "w", encoding="utf-8") as f:
            f.write(render())
        return 0
    names = a.only.split(",") if a.only else list(BY_NAME)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    failed = []
    for name in names:
        try:
            run_bench(BY_NAME[name], a.quick)
        except (RuntimeError, subprocess.CalledProcessError) as e:
            print(f"{name}: {e}", file=sys.stderr)
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)} (their results were left as they were)",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
