#!/usr/bin/python3
"""Independent float64 PyTorch reference of the latent-feedback transformer.

Written from the TEXT of docs/MODEL.md ("The latent-feedback model"),
without reading the C++ implementation.  It is the oracle for `fullband model grad`
(README.md, "Command line"): same weights + same batch -> same per-pass losses and gradients.

    model_ref.py grad --config M.yaml --weights W.safetensors --batch B.safetensors \
                      --passes K [--mixin-from G_IN.safetensors] --out G.safetensors
    model_ref.py init-check --config M.yaml --weights W.safetensors [--check-stats]
    model_ref.py init --config M.yaml --seed S --out W.safetensors   (spec init, for tests)

Jitter is always 0 here.  Plain positions are the segment starts (mixin off), or exactly the
`plain.pass{k}` masks (uint8 (B, T), k = 2..K) read from --mixin-from, after checking them
against the spec (segment starts plain, plain positions a prefix of each segment).
Everything is computed in float64 with torch autograd; nothing is detached across passes.
"""
import argparse, json, math, struct, sys

import numpy as np
import torch
import yaml

F64 = torch.float64

# ----------------------------------------------------------------------------- safetensors
_DT = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
       "I32": np.int32, "U8": np.uint8}
_DT_NAME = {np.dtype(v): k for k, v in _DT.items()}


def st_read(path):
    """-> (dict name -> numpy array, metadata dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    base, out = 8 + n, {}
    for name, info in header.items():
        if info["dtype"] not in _DT:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {info['dtype']}")
        b, e = info["data_offsets"]
        dt = np.dtype(_DT[info["dtype"]]).newbyteorder("<")
        arr = np.frombuffer(raw[base + b:base + e], dtype=dt)
        shape = tuple(info["shape"])
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{path}: tensor {name}: {arr.size} elements for shape {shape}")
        out[name] = arr.reshape(shape).astype(dt.newbyteorder("="))
    return out, meta


def st_write(path, tensors, metadata=None):
    """tensors: dict name -> numpy array (F64/F32/F16/I64/I32/U8), written in sorted order."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])  # (ascontiguousarray would make scalars 1-d)
        data = a.astype(a.dtype.newbyteorder("<")).tobytes(order="C")
        header[name] = {"dtype": _DT_NAME[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ----------------------------------------------------------------------------- config
# The one Python definition of the model's fields and their defaults, and of reading them from
# a job YAML; bench/torch_train_step.py imports them from here.
DEFAULTS = dict(  # docs/MODEL.md, the paper's 1B model
    vocab_size=100352, d_model=1536, n_layers=24, n_heads=16, n_kv_heads=8, head_dim=96,
    ffn_dim=6656, max_seq_len=8192, rope_theta=10000.0, qk_norm=True, attn_gate=True,
    window=2048, full_attention_every=6, depth_scaling=True, eod_id=100257, ignore_id=-1,
    z_loss=1.0e-5, feedback_loss="mean", feedback_state="post_norm", jitter=0.02,
    prefix_mixin=True, pass1_input_norm=True)


def _bool(v, name):
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise ValueError(f"model.{name}: expected a boolean, got {v!r}")


def read_yaml(path):
    """A job YAML file -> its document (a dict; {} for an empty file)."""
    with open(path) as f:
        return yaml.safe_load(f) or {}


def model_config(m, prog="model_ref"):
    """A job's `model:` section (a dict, or None) -> the full model config: docs/MODEL.md
    defaults for missing fields, every value coerced to its default's type. An unknown field is
    ignored with a warning on stderr naming `prog`; a value the model does not accept raises
    ValueError."""
    m = m or {}
    for k in m:
        if k not in DEFAULTS:
            print(f"{prog}: warning: unknown field model.{k} ignored", file=sys.stderr)
    c = dict(DEFAULTS)
    for k, d in DEFAULTS.items():
        if k not in m:
            continue
        v = m[k]
        c[k] = (_bool(v, k) if isinstance(d, bool) else int(v) if isinstance(d, int)
                else float(v) if isinstance(d, float) else str(v))  # float("1e-5") too
    if c["feedback_loss"] not in ("mean", "sum"):
        raise ValueError(f"model.feedback_loss: mean|sum, got {c['feedback_loss']!r}")
    if c["feedback_state"] not in ("post_norm", "pre_norm"):
        raise ValueError(f"model.feedback_state: post_norm|pre_norm, got {c['feedback_state']!r}")
    if c["n_heads"] % c["n_kv_heads"] or c["head_dim"] % 2:
        raise ValueError("model: n_heads must be a multiple of n_kv_heads, head_dim even")
    return c


def load_config(path):
    """The model config of the job YAML at `path` (model_config of its `model:` section)."""
    return model_config(read_yaml(path).get("model"))


# ----------------------------------------------------------------------------- weights
def weight_shapes(c):
    """docs/MODEL.md key table: key -> shape, in table order."""
    V, D, H, Hkv, Dh, F = (c[k] for k in ("vocab_size", "d_model", "n_heads", "n_kv_heads",
                                          "head_dim", "ffn_dim"))
    s = {"embed.weight": (V, D)}
    for l in range(c["n_layers"]):
        p = f"layers.{l}."
        s[p + "attn_norm.weight"] = (D,)
        s[p + "attn.wq.weight"] = (H * Dh, D)
        s[p + "attn.wk.weight"] = (Hkv * Dh, D)
        s[p + "attn.wv.weight"] = (Hkv * Dh, D)
        if c["qk_norm"]:
            s[p + "attn.q_norm.weight"] = (Dh,)
            s[p + "attn.k_norm.weight"] = (Dh,)
        if c["attn_gate"]:
            s[p + "attn.wgate.weight"] = (H, D)
        s[p + "attn.wo.weight"] = (D, H * Dh)
        s[p + "ffn_norm.weight"] = (D,)
        s[p + "ffn.w1.weight"] = (F, D)
        s[p + "ffn.w3.weight"] = (F, D)
        s[p + "ffn.w2.weight"] = (D, F)
    s["final_norm.weight"] = (D,)
    s["feedback.norm_g.weight"] = (D,)
    s["feedback.w_g.weight"] = (D, D)
    s["feedback.w_u.weight"] = (D, D)
    s["feedback.norm_in.weight"] = (D,)
    return s


def init_std(c, key):
    """Spec init: norm gains 1 (std None), W_u/W_g N(0, 1/D), other matrices N(0, 0.02)."""
    if key.endswith("norm.weight") or key.endswith("norm_g.weight") or key.endswith("norm_in.weight"):
        return None
    if key in ("feedback.w_u.weight", "feedback.w_g.weight"):
        return 1.0 / math.sqrt(c["d_model"])
    return 0.02


def init_weights(c, seed):
    g = np.random.default_rng(seed)
    out = {}
    for k, shp in weight_shapes(c).items():
        sd = init_std(c, k)
        out[k] = (np.ones(shp) if sd is None else g.normal(0.0, sd, shp)).astype(np.float32)
    return out


def check_keys(c, arrays):
    """-> list of error strings naming keys (missing / extra / wrong shape)."""
    want, errs = weight_shapes(c), []
    for k, shp in want.items():
        if k not in arrays:
            errs.append(f"missing key {k} (expected shape {list(shp)})")
        elif tuple(arrays[k].shape) != shp:
            errs.append(f"key {k}: shape {list(arrays[k].shape)}, expected {list(shp)}")
    errs += [f"extra key {k}" for k in arrays if k not in want]
    return errs


# ----------------------------------------------------------------------------- the model
def rmsnorm(v, g):
    return v / torch.sqrt((v * v).mean(-1, keepdim=True) + 1e-6) * g


def rope(x, theta):
    """x (..., T, Dh); rotate-half (NeoX): pair (i, i + Dh/2), angle pos * theta^(-2i/Dh)."""
    T, Dh = x.shape[-2], x.shape[-1]
    half = Dh // 2
    inv = theta ** (-2.0 * torch.arange(half, dtype=F64) / Dh)
    ang = torch.arange(T, dtype=F64)[:, None] * inv[None, :]  # (T, Dh/2)
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def is_windowed(c, l):
    full = c["full_attention_every"] > 0 and (l + 1) % c["full_attention_every"] == 0
    return c["window"] > 0 and not full


def attention(c, W, l, a):
    """a (B, T, D) = attn-norm output -> concat(o_h) (B, T, H*Dh), gate applied."""
    B, T, _ = a.shape
    H, Hkv, Dh = c["n_heads"], c["n_kv_heads"], c["head_dim"]
    p = f"layers.{l}.attn."
    q = (a @ W[p + "wq.weight"].T).view(B, T, H, Dh).transpose(1, 2)    # (B, H, T, Dh)
    k = (a @ W[p + "wk.weight"].T).view(B, T, Hkv, Dh).transpose(1, 2)  # (B, Hkv, T, Dh)
    v = (a @ W[p + "wv.weight"].T).view(B, T, Hkv, Dh).transpose(1, 2)
    if c["qk_norm"]:
        q, k = rmsnorm(q, W[p + "q_norm.weight"]), rmsnorm(k, W[p + "k_norm.weight"])
    q, k = rope(q, c["rope_theta"]), rope(k, c["rope_theta"])
    g = torch.arange(H) // (H // Hkv)            # query head h reads kv head h // (H/Hkv)
    k, v = k[:, g], v[:, g]
    scores = q @ k.transpose(-1, -2) / math.sqrt(Dh)  # (B, H, T_q, T_k)
    t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]
    masked = s > t
    if is_windowed(c, l):
        masked = masked | (s <= t - c["window"])
    o = torch.softmax(scores.masked_fill(masked, float("-inf")), dim=-1) @ v  # (B, H, T, Dh)
    if c["attn_gate"]:
        o = o * torch.sigmoid(a @ W[p + "wgate.weight"].T).transpose(1, 2)[..., None]
    return o.transpose(1, 2).reshape(B, T, H * Dh)


def stack(c, W, x):
    """x0 (B, T, D) -> x_L (pre final norm)."""
    r = 1.0 / math.sqrt(c["n_layers"]) if c["depth_scaling"] else 1.0
    for l in range(c["n_layers"]):
        p = f"layers.{l}."
        a = rmsnorm(x, W[p + "attn_norm.weight"])
        x = x + r * (attention(c, W, l, a) @ W[p + "attn.wo.weight"].T)
        m = rmsnorm(x, W[p + "ffn_norm.weight"])
        f = torch.nn.functional.silu(m @ W[p + "ffn.w1.weight"].T) * (m @ W[p + "ffn.w3.weight"].T)
        x = x + r * (f @ W[p + "ffn.w2.weight"].T)
    return x


def readout_loss(c, W, h, targets):
    """h (B, T, D) post final norm -> CE + z-term, both pooled over every counted target."""
    logits = h @ W["embed.weight"].T  # (B, T, V)
    lse = torch.logsumexp(logits, dim=-1)
    counted = targets != c["ignore_id"]
    n = max(int(counted.sum()), 1)
    tgt = torch.where(counted, targets, torch.zeros_like(targets))
    nll = lse - logits.gather(-1, tgt[..., None])[..., 0]
    ce = (nll * counted).sum() / n
    z = c["z_loss"] * (lse * lse * counted).sum() / n
    return ce + z


def segment_starts(c, inputs):
    """(B, T) bool: t == 0 or the input token at t-1 is eod_id."""
    st = torch.zeros(inputs.shape, dtype=torch.bool)
    st[:, 0] = True
    st[:, 1:] = inputs[:, :-1] == c["eod_id"]
    return st


def check_plain_mask(c, inputs, plain, name):
    """Raise ValueError unless `plain` (B, T) bool is a prefix of every segment, p >= 1."""
    if tuple(plain.shape) != tuple(inputs.shape):
        raise ValueError(f"{name}: shape {list(plain.shape)}, expected {list(inputs.shape)}")
    st = segment_starts(c, inputs)
    bad = st & ~plain
    if bad.any():
        b, t = (int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name}: segment start (b={b}, t={t}) is not plain")
    bad = plain[:, 1:] & ~st[:, 1:] & ~plain[:, :-1]  # plain after a non-plain, same segment
    if bad.any():
        b, t = (int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name}: plain positions not a prefix of their segment at (b={b}, t={t + 1})")


def forward(c, W, inputs, targets, K, plain_masks=None):
    """inputs, targets (B, T) int64 (tokens[:, :-1], tokens[:, 1:]); W: key -> float64 tensor;
    plain_masks: {k: (B, T) bool} for k >= 2, else segment starts.
    -> (list of per-pass losses l_1..l_K, total loss)."""
    if (inputs < 0).any() or (inputs >= c["vocab_size"]).any():
        raise ValueError("input token outside [0, vocab_size)")
    if ((targets != c["ignore_id"]) & ((targets < 0) | (targets >= c["vocab_size"]))).any():
        raise ValueError("counted target outside [0, vocab_size)")
    if inputs.shape[1] > c["max_seq_len"]:
        raise ValueError(f"T = {inputs.shape[1]} exceeds max_seq_len {c['max_seq_len']}")
    e = W["embed.weight"][inputs]  # (B, T, D)
    losses, h_prev = [], None
    for k in range(1, K + 1):
        if k == 1:
            x0 = rmsnorm(e, W["feedback.norm_in.weight"]) if c["pass1_input_norm"] else e
        else:
            plain = plain_masks[k] if plain_masks else segment_starts(c, inputs)
            shifted = torch.cat([torch.zeros_like(h_prev[:, :1]), h_prev[:, :-1]], dim=1)  # ĥ_{t-1}
            gate = torch.sigmoid(rmsnorm(e, W["feedback.norm_g.weight"]) @ W["feedback.w_g.weight"].T)
            fused = (shifted @ W["feedback.w_u.weight"].T) * gate  # position 0 is always plain
            u = torch.where(plain[..., None], e, fused)
            x0 = rmsnorm(u, W["feedback.norm_in.weight"])
        xL = stack(c, W, x0)
        h = rmsnorm(xL, W["final_norm.weight"])
        losses.append(readout_loss(c, W, h, targets))
        h_prev = h if c["feedback_state"] == "post_norm" else xL
    rest = losses[1:]
    if not rest:
        total = losses[0]
    elif c["feedback_loss"] == "mean":
        total = losses[0] + sum(rest) / len(rest)
    else:
        total = losses[0] + sum(rest)
    return losses, total


def grad(c, arrays, tokens, K, plain_masks=None):
    """-> dict of float64 numpy outputs: loss.pass{k}, loss.total, grad.<key>."""
    W = {k: torch.tensor(np.asarray(v, dtype=np.float64), dtype=F64, requires_grad=True)
         for k, v in arrays.items()}
    tokens = torch.as_tensor(tokens, dtype=torch.int64)
    losses, total = forward(c, W, tokens[:, :-1], tokens[:, 1:], K, plain_masks)
    total.backward()
    out = {f"loss.pass{k + 1}": np.array(l.item()) for k, l in enumerate(losses)}
    out["loss.total"] = np.array(total.item())
    for k, w in W.items():
        out["grad." + k] = (w.grad if w.grad is not None else torch.zeros_like(w)).detach().numpy()
    return out


# ----------------------------------------------------------------------------- CLI
def _die(msg):
    print(f"model_ref: {msg}", file=sys.stderr)
    sys.exit(2)


def _load_weights(c, path):
    arrays, _ = st_read(path)
    errs = check_keys(c, arrays)
    if errs:
        _die(f"{path}: " + "; ".join(errs))
    return arrays


def cmd_grad(a):
    c = load_config(a.config)
    arrays = _load_weights(c, a.weights)
    bt, _ = st_read(a.batch)
    if "tokens" not in bt or bt["tokens"].ndim != 2 or bt["tokens"].shape[1] < 2:
        _die(f"{a.batch}: need tensor `tokens` of shape (B, T+1), T >= 1")
    tokens = torch.as_tensor(bt["tokens"].astype(np.int64))
    if a.passes < 1:
        _die("--passes must be >= 1")
    masks = None
    if a.mixin_from:
        mf, _ = st_read(a.mixin_from)
        masks = {}
        for k in range(2, a.passes + 1):
            name = f"plain.pass{k}"
            if name not in mf:
                _die(f"{a.mixin_from}: missing tensor {name}")
            masks[k] = torch.as_tensor(mf[name] != 0)
            try:
                check_plain_mask(c, tokens[:, :-1], masks[k], f"{a.mixin_from}: {name}")
            except ValueError as ex:
                _die(str(ex))
    try:
        out = grad(c, arrays, tokens, a.passes, masks)
    except ValueError as ex:
        _die(str(ex))
    st_write(a.out, {k: v.astype(np.float32) for k, v in out.items()})
    print(" ".join(f"{k}={float(v):.9g}" for k, v in out.items() if k.startswith("loss.")))


def cmd_init_check(a):
    c = load_config(a.config)
    arrays, _ = st_read(a.weights)
    errs = check_keys(c, arrays)
    bad = 0
    for k in weight_shapes(c):
        if k not in arrays or tuple(arrays[k].shape) != weight_shapes(c)[k]:
            continue
        v = arrays[k].astype(np.float64)
        sd, n = init_std(c, k), v.size
        mean, std = v.mean(), v.std()
        if sd is None:
            ok, want = bool(np.all(v == 1.0)), "ones"
        else:  # loose statistical bounds (≈ 6 sigma plus slack for tiny tensors)
            ok = abs(mean) <= 6 * sd / math.sqrt(n) + 1e-12 and \
                abs(std - sd) <= 6 * sd / math.sqrt(2 * n) + 0.05 * sd
            want = f"N(0, {sd:.4g}^2)"
        flag = "" if ok else "  <-- off"
        bad += not ok
        print(f"{k:40s} {str(list(v.shape)):14s} mean {mean:+.5f} std {std:.5f}  expect {want}{flag}")
    if errs:
        _die("; ".join(errs))
    if a.check_stats and bad:
        _die(f"{bad} tensor(s) do not look like the spec init")


def cmd_init(a):
    c = load_config(a.config)
    st_write(a.out, init_weights(c, a.seed))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grad", help="per-pass losses and all gradients, float64")
    g.add_argument("--config", required=True)
    g.add_argument("--weights", required=True)
    g.add_argument("--batch", required=True)
    g.add_argument("--passes", type=int, required=True)
    g.add_argument("--mixin-from", dest="mixin_from")
    g.add_argument("--out", required=True)
    g.set_defaults(fn=cmd_grad)
    i = sub.add_parser("init-check", help="keys/shapes and per-key init statistics")
    i.add_argument("--config", required=True)
    i.add_argument("--weights", required=True)
    i.add_argument("--check-stats", action="store_true",
                   help="also fail when a tensor's mean/std does not look like the spec init")
    i.set_defaults(fn=cmd_init_check)
    n = sub.add_parser("init", help="spec init with numpy (for tests), float32")
    n.add_argument("--config", required=True)
    n.add_argument("--seed", type=int, default=0)
    n.add_argument("--out", required=True)
    n.set_defaults(fn=cmd_init)
    a = ap.parse_args(argv)
    try:
        a.fn(a)
    except (OSError, ValueError, yaml.YAMLError) as ex:
        _die(str(ex))


if __name__ == "__main__":
    main()
