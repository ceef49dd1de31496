#!/usr/bin/env python3
"""Writes the README main job's coordinator job spec from scripts/demo/train.yaml, so that the
model, data blend, optimizer and pass schedule are defined once:

  - the token stores as absolute paths (the workers run in the job's directory);
  - parallel: DP2, one thread per rank (both cores of a small machine);
  - budget: --token-equivalents of compute (the schedule's phases follow its fraction);
  - checkpoint: every --checkpoint-every steps, under the job's directory;
  - launcher: FULLBAND worker, up to --max-restarts relaunches, --backoff seconds apart;
  - every step logged (the attempt logs are where the summary reads the losses);
  - no runtime.save_to (a job's weights are its checkpoints: `fullband ckpt export`).

usage: make_job.py TRAIN_YAML OUT_YAML --fullband PATH --root DIR [--token-equivalents N]
                   [--checkpoint-every N] [--max-restarts N] [--backoff S]
"""
import argparse
import os

import yaml


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("train_yaml")
    ap.add_argument("out_yaml")
    ap.add_argument("--fullband", required=True)
    ap.add_argument("--root", required=True, help="the directory the store paths are relative to")
    ap.add_argument("--token-equivalents", type=int, default=360448)
    ap.add_argument("--checkpoint-every", type=int, default=25)
    ap.add_argument("--max-restarts", type=int, default=2)
    ap.add_argument("--backoff", type=float, default=3.0)
    a = ap.parse_args()
    job = yaml.safe_load(open(a.train_yaml))
    for source in job["data"]["sources"]:
        source["store"] = os.path.join(os.path.abspath(a.root), source["store"])
    runtime = job.setdefault("runtime", {})
    runtime.pop("save_to", None)
    runtime.update({"threads": 1, "log_every": 1})
    job["parallel"] = {"tp": 1, "dp": 2}
    job["budget"] = {"kind": "token_equivalents", "amount": a.token_equivalents}
    job["checkpoint"] = {"every_steps": a.checkpoint_every, "keep": 2}
    job["launcher"] = {"command": [os.path.abspath(a.fullband), "worker"],
                       "max_restarts": a.max_restarts, "backoff_seconds": a.backoff}
    with open(a.out_yaml, "w") as f:
        f.write("# Written by scripts/demo/make_job.py from " + a.train_yaml + "\n")
        yaml.safe_dump(job, f, sort_keys=False)


if __name__ == "__main__":
    main()
