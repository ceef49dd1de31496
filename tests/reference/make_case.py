#!/usr/bin/python3
"""Random tiny test cases for model_ref.py / `fullband model grad`.

    make_case.py --config-out M.yaml --batch-out B.safetensors --seed S [--preset NAME]
                 [--mixin-out X.safetensors --passes K]
    make_case.py --list

Writes a small `model:` config (sizes drawn from the seed, switches fixed by the preset) and a
batch `tokens` int32 (B=2, T+1) with EOD tokens inside the sequences (including back-to-back
EODs and one at the last input position).  Every config sets `jitter: 0.0` and
`prefix_mixin: false`, the deterministic regime the reference computes.  --mixin-out also
writes random prefix-mixin masks `plain.pass{k}` (uint8 (B, T), k = 2..K) for `--mixin-from`.
"""
import argparse, os, sys

import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_ref import st_write  # noqa: E402

# Switches per preset (sizes come from the seed).  Together they cover GQA / MQA / MHA,
# windows below T with some full layers, all-windowed, all-full, no window, qk_norm /
# attn_gate / depth_scaling on and off, post_norm / pre_norm, mean / sum,
# pass1_input_norm false, z_loss 0 and nonzero.
PRESETS = {
    "gqa_window": dict(heads=(4, 2), n_layers=3, window="small", full_attention_every=3,
                       qk_norm=True, attn_gate=True, depth_scaling=True,
                       feedback_state="post_norm", feedback_loss="mean", z_loss=1e-3,
                       pass1_input_norm=True),
    "mha_plain": dict(heads=(2, 2), n_layers=2, window=0, full_attention_every=0,
                      qk_norm=False, attn_gate=False, depth_scaling=False,
                      feedback_state="pre_norm", feedback_loss="sum", z_loss=0.0,
                      pass1_input_norm=False),
    "mqa_all_window": dict(heads=(4, 1), n_layers=2, window="small", full_attention_every=0,
                           qk_norm=True, attn_gate=False, depth_scaling=True,
                           feedback_state="pre_norm", feedback_loss="mean", z_loss=1e-5,
                           pass1_input_norm=False),
    "all_full_gate": dict(heads=(3, 3), n_layers=2, window="small", full_attention_every=1,
                          qk_norm=False, attn_gate=True, depth_scaling=False,
                          feedback_state="post_norm", feedback_loss="sum", z_loss=1e-2,
                          pass1_input_norm=True),
    "one_layer": dict(heads=(2, 1), n_layers=1, window="small", full_attention_every=2,
                      qk_norm=True, attn_gate=True, depth_scaling=True,
                      feedback_state="post_norm", feedback_loss="mean", z_loss=1e-4,
                      pass1_input_norm=False),
    "window_ge_T": dict(heads=(4, 2), n_layers=3, window="big", full_attention_every=2,
                        qk_norm=True, attn_gate=True, depth_scaling=False,
                        feedback_state="pre_norm", feedback_loss="sum", z_loss=1e-5,
                        pass1_input_norm=True),
    "defaults": dict(),  # every switch at its docs/MODEL.md default (window 2048 > T, full every 6)
    "random": None,      # every switch drawn from the seed
}


def make_config(preset, rng):
    sw = PRESETS[preset]
    if sw is None:
        h = [(2, 2), (4, 2), (4, 1), (3, 3), (6, 2)][rng.integers(5)]
        sw = dict(heads=h, n_layers=int(rng.integers(1, 4)),
                  window=["small", "big", 0][rng.integers(3)],
                  full_attention_every=int(rng.integers(0, 4)),
                  qk_norm=bool(rng.integers(2)), attn_gate=bool(rng.integers(2)),
                  depth_scaling=bool(rng.integers(2)),
                  feedback_state=["post_norm", "pre_norm"][rng.integers(2)],
                  feedback_loss=["mean", "sum"][rng.integers(2)],
                  z_loss=[0.0, 1e-5, 1e-3][rng.integers(3)],
                  pass1_input_norm=bool(rng.integers(2)))
    T = int(rng.integers(8, 25))
    H, Hkv = sw.get("heads", (4, 2))
    V = int(rng.integers(64, 301))
    m = dict(vocab_size=V, d_model=int(rng.choice([16, 24, 32, 48])),
             n_layers=sw.get("n_layers", 2), n_heads=H, n_kv_heads=Hkv,
             head_dim=int(rng.choice([4, 6, 8])), ffn_dim=int(rng.choice([32, 40, 64, 96])),
             max_seq_len=32, rope_theta=float(rng.choice([10000.0, 500.0])),
             eod_id=int(rng.choice([V - 1, int(rng.integers(0, V))])),
             jitter=0.0, prefix_mixin=False)
    for k, v in sw.items():
        if k == "heads":
            continue
        if k == "window":
            v = {"small": int(rng.integers(2, T // 2 + 1)), "big": T + int(rng.integers(0, 4))}.get(v, v)
        m[k] = v
    return {"model": m}, T


def make_tokens(m, T, rng, B=2):
    V, eod = m["vocab_size"], m["eod_id"]
    others = np.array([i for i in range(V) if i != eod])
    tok = rng.choice(others, size=(B, T + 1))
    tok[rng.random((B, T + 1)) < 0.15] = eod
    j = int(rng.integers(1, T - 2))
    tok[0, j:j + 2] = eod            # back-to-back EODs: a one-token segment
    tok[1, T - 1] = eod              # EOD as the last input token (its segment is only the target)
    tok[1, int(rng.integers(0, T - 2))] = eod
    return tok.astype(np.int32)


def random_mixin(m, tokens, K, rng):
    """plain.pass{k}: for each segment, a uniform prefix length p in 1..len is plain."""
    inp = tokens[:, :-1]
    out = {}
    for k in range(2, K + 1):
        plain = np.zeros(inp.shape, np.uint8)
        for b in range(inp.shape[0]):
            starts = [0] + [t for t in range(1, inp.shape[1]) if inp[b, t - 1] == m["eod_id"]]
            for a, e in zip(starts, starts[1:] + [inp.shape[1]]):
                plain[b, a:a + int(rng.integers(1, e - a + 1))] = 1
        out[f"plain.pass{k}"] = plain
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config-out")
    ap.add_argument("--batch-out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", default="random", choices=sorted(PRESETS))
    ap.add_argument("--mixin-out")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--list", action="store_true", help="print the preset names and exit")
    a = ap.parse_args(argv)
    if a.list:
        print("\n".join(PRESETS))
        return
    if not a.config_out or not a.batch_out:
        ap.error("--config-out and --batch-out are required")
    rng = np.random.default_rng(a.seed)
    cfg, T = make_config(a.preset, rng)
    tokens = make_tokens(cfg["model"], T, rng)
    with open(a.config_out, "w") as f:
        f.write(f"# make_case.py --preset {a.preset} --seed {a.seed}\n")
        yaml.safe_dump(cfg, f, sort_keys=False)
    st_write(a.batch_out, {"tokens": tokens})
    if a.mixin_out:
        st_write(a.mixin_out, random_mixin(cfg["model"], tokens, a.passes, rng))


if __name__ == "__main__":
    main()
