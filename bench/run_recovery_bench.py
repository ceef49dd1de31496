#!/usr/bin/env python3
"""Recovery of a coordinated job from kill -9 of a worker rank, phase by phase.

Runs a local coordinator and one DP2 + ZeRO-1 job (the fault tests' model at d_model 128, a
checkpoint every 10 steps), kills worker rank 1 with SIGKILL at several points of the run and
then stops rank 0 with SIGSTOP (a hang, found by the heartbeat deadline), and splits each
recovery, from the kill to the first step the new
attempt gets counted, into:
  detection     kill -> the coordinator marks the job RESTARTING (its log)
  backoff       -> it launches the next attempt (launcher.backoff_seconds)
  launch        -> the new group's rank 0 registers (mpirun, process start, MPI init)
  load          -> rank 0 has restored the checkpoint ("resuming at step", its log)
  first_step    -> the coordinator counts the attempt's first step (the job's history)
and reports the work lost (steps rolled back) against the checkpoint interval. The baseline,
from the same run, is a cold start: submit -> the first counted step of a fresh job. Log times are the UTC wall-clock
prefixes of fullband's logs (common/logging.h), the history's times the coordinator's clock.

  bench/run_recovery_bench.py [--fullband build/cli/fullband] [--kills 3] [--hangs 1]
                              [--backoff 2] [--heartbeat-timeout 3]
Prints one JSON object.
"""
import argparse
import datetime
import json
import os
import random
import re
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

LOG_TIME = re.compile(r"^[DIWE] (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ")


def log_time(path, pattern):
    """The UTC time of the first line of log `path` that matches `pattern`."""
    with open(path) as f:
        for line in f:
            m = LOG_TIME.match(line)
            if m and re.search(pattern, line):
                stamp = datetime.datetime.fromisoformat(m[1]).replace(tzinfo=datetime.timezone.utc)
                return stamp.timestamp()
    raise RuntimeError(f"no line matching {pattern!r} in {path}")


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def write_inputs(work, args):
    rng = random.Random(11)
    ids = [256 if rng.randrange(50) == 0 else rng.randrange(256) for _ in range(1 << 16)]
    with open(f"{work}/tokens.bin", "wb") as f:
        f.write(struct.pack("<%dI" % len(ids), *ids))
    with open(f"{work}/coordinator.yaml", "w") as f:
        f.write(f"listen: 127.0.0.1:0\nstore_dir: {work}/store\njobs_dir: {work}/jobs\n"
                f"tick_seconds: 0.05\nheartbeat_interval_seconds: 0.5\n"
                f"heartbeat_timeout_seconds: {args.heartbeat_timeout}\n")
    d, t = 128, 64
    with open(f"{work}/job.yaml", "w") as f:
        f.write(f"""model: {{vocab_size: 258, eod_id: 256, d_model: {d}, n_layers: 2, n_heads: 4,
        n_kv_heads: 2, head_dim: {d // 4}, ffn_dim: {2 * d}, max_seq_len: {t + 8}, window: 8,
        full_attention_every: 2}}
parallel: {{dp: 2, zero1: true}}
data: {{path: {work}/tokens.bin, batch_size: 8, seq_len: {t}}}
optim: {{lr: 3.0e-3, warmup_steps: 2}}
schedule: {{seed: 4, phases: [{{until: 1.0, mix: {{1: 0.5, 2: 0.3, 3: 0.2}}}}]}}
checkpoint: {{dir: {work}/ckpt, every_steps: {args.checkpoint_every}, keep: 2}}
budget: {{kind: tokens, amount: {args.steps * 8 * t}}}
runtime: {{threads: 1, log_every: 1, peak_gflops: 1}}
launcher: {{command: [{args.fullband}, worker], max_restarts: {args.kills + args.hangs + 1},
           backoff_seconds: {args.backoff}, max_backoff_seconds: {args.backoff}}}
""")


class Coordinator:
    def __init__(self, fullband, work):
        self.fullband = fullband
        self.log = f"{work}/coordinator.log"
        self.proc = subprocess.Popen([fullband, "coordinator", "--config",
                                      f"{work}/coordinator.yaml"], stdout=subprocess.PIPE,
                                     stderr=open(self.log, "w"), text=True)
        port = self.proc.stdout.readline().split()[-1]
        os.environ["FULLBAND_COORDINATOR"] = f"127.0.0.1:{port}"

    def cli(self, *args):
        return subprocess.run([self.fullband, *args], check=True, capture_output=True,
                              text=True).stdout

    def job(self, job_id):
        return json.loads(self.cli("status", job_id, "--json"))

    def history(self, job_id):
        return json.loads(self.cli("status", job_id, "--history", "--json")).get("steps", [])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def wait_for(what, condition, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def rank_pid(work, job_id, rank):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if (f"FULLBAND_JOB_DIR={work}/jobs/{job_id}".encode() in env and
                f"OMPI_COMM_WORLD_RANK={rank}".encode() in env):
            return int(pid)
    return None


def first_counted(history, attempt):
    times = [s["unix_time"] for s in history if int(s.get("attempt", 0)) == attempt]
    return min(times) if times else None


def run(args, work):
    write_inputs(work, args)
    c = Coordinator(args.fullband, work)
    try:
        submitted = time.time()
        job_id = c.cli("submit", f"{work}/job.yaml").strip()
        cold = wait_for("the first step", lambda: first_counted(c.history(job_id), 0)) - submitted
        kills = []
        faults = ["kill"] * args.kills + ["hang"] * args.hangs
        for k, fault in enumerate(faults):
            at = (k + 1) * args.steps // (len(faults) + 1) + 3  # not on a checkpoint
            wait_for(f"step {at}", lambda: int(c.job(job_id)["ledger"].get("steps", 0)) >= at)
            wasted_before = int(c.job(job_id)["ledger"].get("wasted_steps", 0))
            # kill: SIGKILL to rank 1 (an exit); hang: SIGSTOP to rank 0 (its heartbeats stop)
            rank = 1 if fault == "kill" else 0
            pid = wait_for(f"rank {rank}", lambda: rank_pid(work, job_id, rank))
            killed = time.time()
            os.kill(pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
            wait_for("the next attempt's first step",
                     lambda: first_counted(c.history(job_id), k + 1))
            kills.append((fault, killed, wasted_before))
        wait_for("the end", lambda: c.job(job_id)["state"] == "JOB_STATE_COMPLETED")
        job, history = c.job(job_id), c.history(job_id)
    finally:
        c.stop()

    trials = []
    wasted_after = [w for _, _, w in kills[1:]] + [int(job["ledger"].get("wasted_steps", 0))]
    for k, ((fault, killed, wasted_before), wasted_end) in enumerate(zip(kills, wasted_after)):
        a = k + 1
        detected = log_time(c.log, rf"job {job_id} restarting \({a}/")
        launched = log_time(c.log, rf"job {job_id}: launched attempt {a} ")
        registered = log_time(c.log, rf"registered \(attempt {a}\)")
        loaded = log_time(f"{work}/jobs/{job_id}/attempt-{a}.err", r"resuming at step")
        first = first_counted(history, a)
        trials.append({
            "fault": fault,
            "detection_s": round(detected - killed, 3),
            "backoff_s": round(launched - detected, 3),
            "launch_s": round(registered - launched, 3),
            "load_s": round(loaded - registered, 3),
            "first_step_s": round(first - loaded, 3),
            "total_s": round(first - killed, 3),
            "total_without_backoff_s": round(first - killed - (launched - detected), 3),
            "steps_lost": wasted_end - wasted_before,
        })
    kill_trials = [t for t in trials if t["fault"] == "kill"]
    summary = {key: statistics.median(t[key] for t in kill_trials)
               for key in kill_trials[0] if key != "fault"}
    return {
        "bench": "recovery",
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count()},
        "setup": {"layout": "DP2 + ZeRO-1", "steps": args.steps,
                  "checkpoint_every": args.checkpoint_every, "backoff_s": args.backoff,
                  "heartbeat_timeout_s": args.heartbeat_timeout,
                  "step_s": round(float(job["ledger"]["step_seconds"]) /
                                  int(job["ledger"]["steps"]), 4)},
        "baseline_cold_start_s": round(cold, 3),
        "trials": trials,
        "median_of_kills": summary,
        "max_steps_lost": max(t["steps_lost"] for t in trials),
        "ledger": {"steps": int(job["ledger"]["steps"]), "restarts": int(job.get("restarts", 0)),
                   "wasted_steps": int(job["ledger"].get("wasted_steps", 0))},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fullband", default="build/cli/fullband")
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--hangs", type=int, default=1)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--backoff", type=float, default=2)
    p.add_argument("--heartbeat-timeout", type=float, default=3)
    args = p.parse_args()
    args.fullband = os.path.abspath(args.fullband)
    os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                      OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory(prefix="fullband-recovery-") as work:
        print(json.dumps(run(args, work), indent=1))


if __name__ == "__main__":
    sys.exit(main())
