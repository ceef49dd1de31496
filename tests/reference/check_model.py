#!/usr/bin/env python3
"""Checks `fullband model grad` against the independent PyTorch reference (model_ref.py).

For every preset of make_case.py (GQA and MHA, windows and full layers, QK-norm, gates and depth
scaling on and off, pre/post-norm feedback, mean/sum loss, pass-1 input norm off, z-loss) and
K = 1, 2, 3, it writes a config and a batch with EOD tokens inside the sequences, initializes
weights with `fullband model init`, runs one step with `fullband model grad` (float32) and with
model_ref.py (float64, autograd), and requires every loss and every gradient tensor to agree:
||fullband - reference||_2 <= 1e-4 * ||reference||_2. A final case per preset turns the prefix
mixin on: the reference reads the plain masks fullband drew, checks that they obey the spec
(segment starts plain, plain positions a prefix of each segment) and uses them.

usage: check_model.py FULLBAND_BINARY [--presets a,b] [--keep DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_case  # noqa: E402
import model_ref  # noqa: E402
from model_ref import st_read  # noqa: E402

TOL = 1e-4


def in_process(module, argv):
    """Runs a script's main() here (one torch import for the whole check)."""
    out = module.main(argv)
    if out not in (None, 0):
        raise RuntimeError(f"{module.__name__} {' '.join(argv)} returned {out}")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return p.stdout


def rel_err(a, b):
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    nb = np.linalg.norm(b)
    if nb == 0:
        return np.linalg.norm(a)
    return np.linalg.norm(a - b) / nb


def compare(ours_path, ref_path, label):
    ours, _ = st_read(ours_path)
    ref, _ = st_read(ref_path)
    failures, worst = [], (0.0, "")
    for name in sorted(ref):
        if name not in ours:
            failures.append(f"{label}: fullband wrote no {name}")
            continue
        if ours[name].shape != ref[name].shape:
            failures.append(f"{label}: {name} shape {ours[name].shape} vs {ref[name].shape}")
            continue
        e = rel_err(ours[name], ref[name])
        worst = max(worst, (e, name))
        if not e <= TOL:
            failures.append(f"{label}: {name} relative error {e:.3e} > {TOL}")
    extra = [n for n in ours if n.startswith(("grad.", "loss.")) and n not in ref]
    failures += [f"{label}: reference has no {n}" for n in extra]
    return failures, worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fullband")
    ap.add_argument("--presets", default="")
    ap.add_argument("--keep", default="")
    a = ap.parse_args()
    py = sys.executable
    presets = a.presets.split(",") if a.presets else run(
        [py, f"{HERE}/make_case.py", "--list"]).split()
    del py
    work = a.keep or tempfile.mkdtemp(prefix="fullband_ref_")
    os.makedirs(work, exist_ok=True)
    failures, checked = [], 0
    for i, preset in enumerate(presets):
        d = os.path.join(work, preset)
        os.makedirs(d, exist_ok=True)
        m, b, w = f"{d}/M.yaml", f"{d}/B.safetensors", f"{d}/W.safetensors"
        in_process(make_case, ["--preset", preset, "--seed", str(100 + i), "--config-out", m,
                               "--batch-out", b])
        run([a.fullband, "model", "init", "--config", m, "--seed", str(7 + i), "--out", w])
        # fullband's initialization, judged by the reference's reading of the spec.
        in_process(model_ref, ["init-check", "--config", m, "--weights", w, "--check-stats"])
        cases = [(k, "off") for k in (1, 2, 3)] + [(3, "on")]
        for k, mixin in cases:
            label = f"{preset} K={k} mixin={mixin}"
            g, r = f"{d}/G{k}{mixin}.safetensors", f"{d}/R{k}{mixin}.safetensors"
            run([a.fullband, "model", "grad", "--config", m, "--weights", w, "--batch", b,
                 "--passes", str(k), "--jitter", "0", "--mixin", mixin, "--seed", str(i),
                 "--out", g])
            ref_args = ["grad", "--config", m, "--weights", w, "--batch", b, "--passes", str(k),
                        "--out", r]
            if mixin == "on":
                ref_args += ["--mixin-from", g]
            in_process(model_ref, ref_args)
            f, worst = compare(g, r, label)
            failures += f
            checked += 1
            print(f"{label}: worst relative error {worst[0]:.2e} ({worst[1]})"
                  f"{'  FAIL' if f else ''}", flush=True)
    if failures:
        print("\n".join(failures))
        print(f"0 passed, {len(failures)} failed")
        return 1
    print(f"{checked} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
