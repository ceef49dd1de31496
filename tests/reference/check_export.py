#!/usr/bin/env python3
"""Checks `fullband ckpt export` against the independent PyTorch reference (model_ref.py).

Trains a tiny model for 4 steps as a DP2 + ZeRO-1 mpirun group (one rank when mpirun is not
found), exports the checkpoint of step 4 to one safetensors file and its model config as JSON,
and requires that the reference, loading exactly those two files, computes the same K-pass
losses as `fullband model grad` on the same weights and batch, for K = 1, 2, 3:
|fullband - reference| <= 1e-5 * |reference| for every pass and the total. The exported file's
tensors must also be every parameter at its full docs/MODEL.md shape, the moments left out.

usage: check_export.py FULLBAND_BINARY
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import model_ref  # noqa: E402
from model_ref import st_read, st_write  # noqa: E402

TOL = 1e-5


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return p.stdout


def losses(text):
    """{"pass1": ..., "total": ...} from either program's printed losses: fullband's
    "loss.total X pass1 Y ..." or the reference's "loss.pass1=Y ... loss.total=X"."""
    words = text.replace("loss.", "").replace("=", " ").split()
    return {words[i]: float(words[i + 1]) for i in range(0, len(words) - 1, 2)}


def main():
    fullband = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp(prefix="fullband_export_")
    try:
        rng = np.random.default_rng(5)
        ids = rng.integers(0, 256, size=1 << 15).astype("<u4")
        ids[rng.integers(0, ids.size, size=ids.size // 40)] = 256
        ids.tofile(f"{work}/tokens.bin")
        mpirun = shutil.which("mpirun")
        dp = 2 if mpirun else 1
        with open(f"{work}/train.yaml", "w") as f:
            f.write(f"""
model: {{vocab_size: 260, eod_id: 256, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2,
        head_dim: 8, ffn_dim: 64, max_seq_len: 32, window: 8, full_attention_every: 2}}
parallel: {{dp: {dp}, zero1: {str(dp > 1).lower()}}}
data: {{path: {work}/tokens.bin, batch_size: 8, seq_len: 24}}
optim: {{lr: 3.0e-3, warmup_steps: 2}}
schedule: {{steps: 4, phases: [{{until: 1.0, mix: {{1: 0.5, 2: 0.3, 3: 0.2}}}}]}}
checkpoint: {{dir: {work}/ckpt, every_steps: 4}}
runtime: {{threads: 1, peak_gflops: 1}}
""")
        train = [fullband, "train", f"{work}/train.yaml"]
        if mpirun:
            env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            run([mpirun, "--oversubscribe", "--bind-to", "none", "-np", "2"] + train, env)
        else:
            run(train)
        out, config = f"{work}/model.safetensors", f"{work}/model.json"
        run([fullband, "ckpt", "export", f"{work}/ckpt/step-4", "--out", out])
        weights, meta = st_read(out)
        expected = model_ref.weight_shapes(model_ref.load_config(config))
        assert {k: tuple(v.shape) for k, v in weights.items()} == expected, "exported tensors"
        assert meta.get("step") == "4", meta
        tokens = rng.integers(0, 256, size=(3, 17)).astype(np.int32)
        tokens[1, 5] = 256
        st_write(f"{work}/batch.safetensors", {"tokens": tokens})
        worst = 0.0
        for k in (1, 2, 3):
            ours = losses(run([fullband, "model", "grad", "--config", config, "--weights", out,
                               "--batch", f"{work}/batch.safetensors", "--passes", str(k),
                               "--jitter", "0", "--mixin", "off", "--out", f"{work}/g.st"]))
            ref = losses(run([sys.executable, f"{HERE}/model_ref.py", "grad", "--config",
                              config, "--weights", out, "--batch",
                              f"{work}/batch.safetensors", "--passes", str(k),
                              "--out", f"{work}/r.st"]))
            assert set(ref) == {f"pass{i}" for i in range(1, k + 1)} | {"total"}, ref
            for name, r in ref.items():
                e = abs(ours[name] - r) / abs(r)
                worst = max(worst, e)
                assert e <= TOL, f"K={k} {name}: fullband {ours[name]} reference {r}"
            print(f"K={k}: " + " ".join(f"{n} {ref[n]:.6f}" for n in sorted(ref)))
        print(f"export of a DP{dp} checkpoint: losses agree, worst relative error {worst:.1e}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
