#!/usr/bin/python3
"""PyTorch CPU baseline of one K-pass training step of the latent-feedback transformer.

The same model (docs/MODEL.md) and the same step as fullband's trainer (docs/DESIGN.md §1):
K passes over one batch, pass 1 on RMSNorm(e; norm_in), pass k >= 2 on RMSNorm(u; norm_in) with
u = e at plain positions (segment starts + a random prefix per segment per pass) and
u = (shift(h[k-1] + U(-jitter, jitter)) W_u^T) * sigmoid(RMSNorm(e; norm_g) W_g^T) elsewhere;
tied readout, cross-entropy + z-loss per pass, total = l1 + mean(l2..lK) (or sum), one
`loss.backward()` through all passes (nothing detached), torch.optim.AdamW (lr 1e-3, wd 0.1),
zero_grad(set_to_none=True).  float32 throughout.

Written the way a PyTorch user would make it fast on CPU (torch 1.13 has no fused attention):
q/k/v/gate projections fused into one Linear and w1/w3 into one (same parameters, concatenated;
nanoGPT-style), split() instead of slicing so the backward is one cat, RMSNorm as an
autograd.Function with a hand-written backward (~30% faster than autograd of the composite),
the 1/sqrt(Dh) softmax scale folded into the q RMSNorm gain, the causal (and window) mask added
inside baddbmm, GQA with the query heads of a group stacked along the sequence axis (no K/V
repeat), the feedback gate sigmoid(RMSNorm(e) W_g^T) computed once per step and shared by every
feedback pass, plain masks drawn with vectorized numpy.  Readout: full (B*T, V) logits
("full_logits"); by default one logsumexp serves CE (lse - logit[target]) and the z-loss
(--ce cross_entropy: F.cross_entropy plus a separate logsumexp, ~2x slower on V = 100352).
Tried and not used: torch.jit.script (Debian's torch has no LLVM, so no CPU fusion: scripted
elementwise code was slower), AdamW(foreach=True) (no faster on CPU).

Settings are the caller's (environment variables are read at library load): see
bench/run_train_bench.py, which runs this with PyTorch's best settings on this machine.

    torch_train_step.py --config tiny|small|FILE.yaml --passes K --recompute none|full
                        --steps N [--warmup W] [--threads 2] [--peak-gflops X]
    torch_train_step.py --selfcheck      (float32 losses/gradients vs tests/reference/model_ref.py)

Prints one JSON line per measurement, like fullband's bench/train_step:
{"impl": "torch", "config": "tiny", "passes": K, "recompute": "none", "tokens_per_s": ...,
 "step_s_median": ..., "peak_rss_mib": ..., "mfu": ..., ...}
"""
import argparse
import ctypes
import json
import math
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.checkpoint  # noqa: F401  (torch.utils.checkpoint is not imported by torch)
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REF_DIR = os.path.join(os.path.dirname(HERE), "tests", "reference")
sys.path.insert(0, REF_DIR)
import model_ref  # noqa: E402  (the model's fields, defaults and YAML reading: one definition)


def ffn_dim_for(d):
    return int(math.ceil(8 * d / 3 / 64) * 64)


def preset(name):
    """Built-in benchmark configs -> (model dict, batch, seq_len)."""
    if name == "tiny":
        V, D, L, H, B, T = 4096, 256, 4, 4, 8, 256
    elif name == "small":
        V, D, L, H, B, T = 100352, 512, 8, 8, 4, 512
    else:
        raise ValueError(name)
    m = dict(model_ref.DEFAULTS)
    m.update(vocab_size=V, d_model=D, n_layers=L, n_heads=H, n_kv_heads=H, head_dim=64,
             ffn_dim=ffn_dim_for(D), window=0, eod_id=V - 1, max_seq_len=max(T, 8192))
    return m, B, T


def load_yaml_config(path):
    """FILE.yaml: `model:` section (model_ref.model_config: docs/MODEL.md defaults for missing
    fields), optional `data: {batch_size, seq_len}` -> (model dict, B, T)."""
    doc = model_ref.read_yaml(path)
    m = model_ref.model_config(doc.get("model"), prog="torch_train_step")
    data = doc.get("data", {}) or {}
    B = int(data.get("batch_size", 8))      # fullband's DataConfig defaults
    T = int(data.get("seq_len", 256))
    if T > m["max_seq_len"]:
        raise ValueError(f"data.seq_len {T} exceeds model.max_seq_len {m['max_seq_len']}")
    return m, B, T


# ----------------------------------------------------------------------------- the model
class _RMSNorm(torch.autograd.Function):
    """RMSNorm(x; g) = x / sqrt(mean(x^2) + 1e-6) * g over the last axis, with a hand-written
    backward (fewer kernels than autograd of the composite: measured ~30% faster fwd+bwd).
    g has shape x.shape[-g.dim():] (a (D) gain, or (heads, Dh) for the per-head q/k norms)."""

    @staticmethod
    def forward(ctx, x, g):
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        xh = x * r
        ctx.save_for_backward(xh, r, g)
        return xh * g

    @staticmethod
    def backward(ctx, dy):
        xh, r, g = ctx.saved_tensors
        dyg = dy * g
        dx = (dyg - xh * (dyg * xh).mean(-1, keepdim=True)) * r
        dg = (dy * xh).reshape(-1, *g.shape).sum(0) if ctx.needs_input_grad[1] else None
        return dx, dg


rmsnorm = _RMSNorm.apply


class Model(torch.nn.Module):
    """Parameters of docs/MODEL.md, with wq|wk|wv|wgate and w1|w3 stored concatenated."""

    def __init__(self, c, seed=0):
        super().__init__()
        self.c = c
        V, D, L = c["vocab_size"], c["d_model"], c["n_layers"]
        H, Hkv, Dh, Fd = c["n_heads"], c["n_kv_heads"], c["head_dim"], c["ffn_dim"]
        if H % Hkv or Dh % 2:
            raise ValueError("n_heads must be a multiple of n_kv_heads, head_dim even")
        self.qkvg_sizes = [H * Dh, Hkv * Dh, Hkv * Dh] + ([H] if c["attn_gate"] else [])
        gen = torch.Generator().manual_seed(seed)

        def mat(rows, cols, std=0.02):
            return torch.nn.Parameter(torch.randn(rows, cols, generator=gen) * std)

        def gain(n):
            return torch.nn.Parameter(torch.ones(n))

        self.embed = mat(V, D)
        self.layers = torch.nn.ModuleList()
        for _ in range(L):
            lay = torch.nn.Module()
            lay.attn_norm = gain(D)
            lay.wqkvg = mat(sum(self.qkvg_sizes), D)
            if c["qk_norm"]:
                lay.q_norm, lay.k_norm = gain(Dh), gain(Dh)
            lay.wo = mat(D, H * Dh)
            lay.ffn_norm = gain(D)
            lay.w13 = mat(2 * Fd, D)
            lay.w2 = mat(D, Fd)
            self.layers.append(lay)
        self.final_norm = gain(D)
        self.norm_g = gain(D)
        self.w_g = mat(D, D, 1.0 / math.sqrt(D))
        self.w_u = mat(D, D, 1.0 / math.sqrt(D))
        self.norm_in = gain(D)

    # docs/MODEL.md key <-> our parameter (slice)
    def key_map(self):
        """-> list of (key, param, row_start, row_end) (row range None = whole tensor)."""
        c, out = self.c, [("embed.weight", self.embed, None, None)]
        for l, lay in enumerate(self.layers):
            p = f"layers.{l}."
            out.append((p + "attn_norm.weight", lay.attn_norm, None, None))
            names = ["attn.wq.weight", "attn.wk.weight", "attn.wv.weight", "attn.wgate.weight"]
            o = 0
            for n, s in zip(names, self.qkvg_sizes):
                out.append((p + n, lay.wqkvg, o, o + s))
                o += s
            if c["qk_norm"]:
                out.append((p + "attn.q_norm.weight", lay.q_norm, None, None))
                out.append((p + "attn.k_norm.weight", lay.k_norm, None, None))
            out.append((p + "attn.wo.weight", lay.wo, None, None))
            out.append((p + "ffn_norm.weight", lay.ffn_norm, None, None))
            Fd = c["ffn_dim"]
            out.append((p + "ffn.w1.weight", lay.w13, 0, Fd))
            out.append((p + "ffn.w3.weight", lay.w13, Fd, 2 * Fd))
            out.append((p + "ffn.w2.weight", lay.w2, None, None))
        out += [("final_norm.weight", self.final_norm, None, None),
                ("feedback.norm_g.weight", self.norm_g, None, None),
                ("feedback.w_g.weight", self.w_g, None, None),
                ("feedback.w_u.weight", self.w_u, None, None),
                ("feedback.norm_in.weight", self.norm_in, None, None)]
        return out

    @torch.no_grad()
    def load_arrays(self, arrays):
        for key, p, a, b in self.key_map():
            t = torch.as_tensor(np.asarray(arrays[key], dtype=np.float32))
            (p if a is None else p[a:b]).copy_(t)

    def grads_by_key(self):
        out = {}
        for key, p, a, b in self.key_map():
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            out[key] = (g if a is None else g[a:b]).detach().double().numpy()
        return out


class Step:
    """Precomputed per-(B, T) tables and the K-pass loss."""

    def __init__(self, model, B, T, recompute="none", ce="lse"):
        c = self.c = model.c
        self.ce = ce
        self.m, self.B, self.T, self.recompute = model, B, T, recompute
        H, Hkv, Dh = c["n_heads"], c["n_kv_heads"], c["head_dim"]
        self.G = H // Hkv
        self.r = 1.0 / math.sqrt(c["n_layers"]) if c["depth_scaling"] else 1.0
        self.scale = 1.0 / math.sqrt(Dh)
        # RoPE tables (T, 1, Dh) for x*cos + roll(x, Dh/2)*sin_signed (rotate-half pairing).
        half = Dh // 2
        inv = c["rope_theta"] ** (-2.0 * torch.arange(half, dtype=torch.float64) / Dh)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        cos, sin = torch.cos(ang), torch.sin(ang)
        self.cos = torch.cat([cos, cos], -1).float()[:, None, :].contiguous()
        self.sin = torch.cat([-sin, sin], -1).float()[:, None, :].contiguous()
        # additive masks (G*T, T): query heads of one KV group are stacked along the rows.
        t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]
        self.masks = {}
        for l in range(c["n_layers"]):
            windowed = self.is_windowed(l)
            if windowed not in self.masks:
                bad = s > t
                if windowed:
                    bad = bad | (s <= t - c["window"])
                add = torch.zeros(T, T).masked_fill_(bad, float("-inf"))
                self.masks[windowed] = add.repeat(self.G, 1).contiguous()

    def is_windowed(self, l):
        c = self.c
        full = c["full_attention_every"] > 0 and (l + 1) % c["full_attention_every"] == 0
        return c["window"] > 0 and not full

    # one transformer layer, x (B, T, D) -> (B, T, D)
    def layer(self, x, l):
        c, lay = self.c, self.m.layers[l]
        B, T = x.shape[0], x.shape[1]
        H, Hkv, Dh, G = c["n_heads"], c["n_kv_heads"], c["head_dim"], self.G
        a = rmsnorm(x, lay.attn_norm)
        parts = F.linear(a, lay.wqkvg).split(self.m.qkvg_sizes, -1)
        q = parts[0].view(B, T, H, Dh)
        k = parts[1].view(B, T, Hkv, Dh)
        v = parts[2].view(B, T, Hkv, Dh)
        if c["qk_norm"]:
            q = rmsnorm(q, lay.q_norm * self.scale)   # softmax scale folded into the q gain
            k = rmsnorm(k, lay.k_norm)
        else:
            q = q * self.scale
        q = torch.addcmul(q * self.cos, q.roll(Dh // 2, -1), self.sin)
        k = torch.addcmul(k * self.cos, k.roll(Dh // 2, -1), self.sin)
        # (B*Hkv, G*T, Dh): query head h = g*G + j of KV group g at rows j*T .. j*T+T-1
        q = q.view(B, T, Hkv, G, Dh).permute(0, 2, 3, 1, 4).reshape(B * Hkv, G * T, Dh)
        k = k.permute(0, 2, 1, 3).reshape(B * Hkv, T, Dh)
        v = v.permute(0, 2, 1, 3).reshape(B * Hkv, T, Dh)
        s = torch.baddbmm(self.masks[self.is_windowed(l)], q, k.transpose(1, 2))
        o = torch.bmm(torch.softmax(s, -1), v)                       # (B*Hkv, G*T, Dh)
        o = o.view(B, Hkv, G, T, Dh).permute(0, 3, 1, 2, 4).reshape(B, T, H, Dh)
        if c["attn_gate"]:
            o = o * torch.sigmoid(parts[3]).unsqueeze(-1)
        x = torch.add(x, F.linear(o.reshape(B, T, H * Dh), lay.wo), alpha=self.r)
        m = rmsnorm(x, lay.ffn_norm)
        g, u = F.linear(m, lay.w13).chunk(2, -1)
        return torch.add(x, F.linear(F.silu(g) * u, lay.w2), alpha=self.r)

    def stack(self, x):
        for l in range(self.c["n_layers"]):
            if self.recompute == "full":
                x = torch.utils.checkpoint.checkpoint(self.layer, x, l, use_reentrant=False)
            else:
                x = self.layer(x, l)
        return x

    def readout_loss(self, h, targets, counted):
        """Full (B*T, V) logits.  CE + z_loss * mean(lse^2) over the counted targets.
        ce="lse" (default): lse = logsumexp(logits) once, CE = mean(lse - logit[target]), the
        z-term from the same lse (one saved (B*T, V) tensor per pass; measured ~2x faster than
        F.cross_entropy + a separate logsumexp).  ce="cross_entropy": literally
        F.cross_entropy(logits, targets) + z_loss * mean(logsumexp(logits)^2)."""
        c = self.c
        logits = F.linear(h.reshape(-1, h.shape[-1]), self.m.embed)
        tgt = targets.reshape(-1)
        zl = c["z_loss"]
        if self.ce == "cross_entropy":
            ce = F.cross_entropy(logits, tgt, ignore_index=c["ignore_id"])
            if zl == 0:
                return ce
            lse = torch.logsumexp(logits, -1)
            if counted is None:
                return ce + zl * lse.pow(2).mean()
            cm = counted.reshape(-1)
            return ce + zl * (lse.pow(2) * cm).sum() / cm.sum().clamp(min=1)
        lse = torch.logsumexp(logits, -1)
        if counted is None:
            nll = lse - logits.gather(1, tgt.unsqueeze(1)).squeeze(1)
            per = nll if zl == 0 else nll + zl * lse.pow(2)
            return per.mean()
        cm = counted.reshape(-1)
        safe = torch.where(cm > 0, tgt, torch.zeros_like(tgt))
        nll = lse - logits.gather(1, safe.unsqueeze(1)).squeeze(1)
        per = nll if zl == 0 else nll + zl * lse.pow(2)
        return (per * cm).sum() / cm.sum().clamp(min=1)

    def losses(self, inputs, targets, K, plain_masks, jitter):
        """inputs/targets (B, T) int64; plain_masks {k: (B, T, 1) bool}; -> (losses, total)."""
        c, m = self.c, self.m
        counted = None
        if bool((targets == c["ignore_id"]).any()):
            counted = (targets != c["ignore_id"]).float()
        e = F.embedding(inputs, m.embed)
        losses, h_prev, gate = [], None, None
        for k in range(1, K + 1):
            if k == 1:
                x0 = rmsnorm(e, m.norm_in) if c["pass1_input_norm"] else e
            else:
                if gate is None:  # depends on e only: shared by every feedback pass
                    gate = torch.sigmoid(F.linear(rmsnorm(e, m.norm_g), m.w_g))
                hh = h_prev
                if jitter > 0:
                    hh = hh + torch.empty_like(hh).uniform_(-jitter, jitter)
                fu = F.linear(hh[:, :-1], m.w_u)                      # ĥ_{t-1} W_u^T, t >= 1
                fused = torch.cat([e[:, :1], fu * gate[:, 1:]], 1)   # position 0 is always plain
                u = torch.where(plain_masks[k], e, fused)
                x0 = rmsnorm(u, m.norm_in)
            xL = self.stack(x0)
            h = rmsnorm(xL, m.final_norm)
            losses.append(self.readout_loss(h, targets, counted))
            h_prev = h if c["feedback_state"] == "post_norm" else xL
        if K == 1:
            total = losses[0]
        elif c["feedback_loss"] == "mean":
            total = losses[0] + sum(losses[1:]) / (K - 1)
        else:
            total = sum(losses)
        return losses, total


def plain_masks_np(inputs, eod_id, K, mixin, rng):
    """inputs (B, T) int numpy -> {k: (B, T) bool} for k = 2..K, vectorized.
    Segment starts (t = 0 or input t-1 == eod) are plain; with the mixin, for each segment and
    pass a prefix of p ~ Uniform{1..len} positions is plain."""
    B, T = inputs.shape
    starts = np.zeros((B, T), bool)
    starts[:, 0] = True
    starts[:, 1:] = inputs[:, :-1] == eod_id
    if not mixin:
        return {k: starts for k in range(2, K + 1)}
    flat = starts.ravel()
    sidx = np.flatnonzero(flat)                       # segment start offsets (flat; rows too)
    lens = np.diff(np.append(sidx, B * T))
    seg = np.cumsum(flat) - 1                         # segment id of every position
    off = np.arange(B * T) - sidx[seg]                # offset inside its segment
    out = {}
    for k in range(2, K + 1):
        p = (rng.random(len(sidx)) * lens).astype(np.int64) + 1   # Uniform{1..len}
        out[k] = (off < p[seg]).reshape(B, T)
    return out


def random_tokens(V, eod, B, T, rng):
    """(B, T+1) ids: random non-EOD ids with an EOD about every 100 tokens."""
    tok = rng.integers(0, V - 1, size=(B, T + 1))
    tok[tok >= eod] += 1
    tok[rng.random((B, T + 1)) < 0.01] = eod
    return tok


# ----------------------------------------------------------------------------- environment
def blas_info():
    """Which BLAS this torch calls (it links the system libblas.so.3) and its settings."""
    info = {"torch": torch.__version__}
    try:
        libs = set()
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if "blas" in p or "mkl" in p:
                    libs.add(os.path.realpath(p))
        info["libs"] = sorted(libs)
    except OSError:
        pass
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_config.restype = ctypes.c_char_p
        lib.openblas_get_corename.restype = ctypes.c_char_p
        info["name"] = "openblas"
        info["config"] = lib.openblas_get_config().decode()
        info["core"] = lib.openblas_get_corename().decode()
        info["openblas_threads"] = int(lib.openblas_get_num_threads())
    except (OSError, AttributeError):
        info["name"] = "unknown"
    cfg = torch.__config__.show()
    info["mkl"] = "MKL" in cfg and "MKL not found" not in torch.__config__.parallel_info()
    info["aten_cpu_capability"] = next((l.split(":")[1].strip() for l in cfg.splitlines()
                                        if "CPU capability usage" in l), "?")
    return info


def set_openblas_threads(n):
    try:
        ctypes.CDLL("libopenblas.so.0").openblas_set_num_threads(int(n))
    except (OSError, AttributeError):
        pass


def measure_peak_gflops(threads):
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    for _ in range(2):
        torch.mm(a, b)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * 2048 ** 3 / best / 1e9


# ----------------------------------------------------------------------------- benchmark
def bench(args):
    torch.set_num_threads(args.threads)
    set_openblas_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.config in ("tiny", "small"):
        c, B, T = preset(args.config)
    else:
        c, B, T = load_yaml_config(args.config)
    if args.batch:
        B = args.batch
    if args.seq_len:
        T = args.seq_len
    K = args.passes
    model = Model(c, seed=args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    step = Step(model, B, T, args.recompute, args.ce)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1,
                            foreach=args.foreach)
    rng = np.random.default_rng(args.seed)
    jitter = c["jitter"]

    def one_step(tok):
        t0 = time.perf_counter()
        inputs = torch.from_numpy(tok[:, :-1])
        targets = torch.from_numpy(tok[:, 1:])
        masks = {k: torch.from_numpy(v).unsqueeze(-1) for k, v in
                 plain_masks_np(tok[:, :-1], c["eod_id"], K, c["prefix_mixin"], rng).items()}
        losses, total = step.losses(inputs, targets, K, masks, jitter)
        total.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0, [float(l) for l in losses]

    times, losses = [], []
    for i in range(args.warmup + args.steps):
        tok = random_tokens(c["vocab_size"], c["eod_id"], B, T, rng)
        dt, losses = one_step(tok)
        if i >= args.warmup:
            times.append(dt)
        if args.verbose:
            print(f"step {i}: {dt:.3f} s losses {losses}", file=sys.stderr)
    med = statistics.median(times)
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    L, H, Dh = c["n_layers"], c["n_heads"], c["head_dim"]
    flops = (6.0 * n_params + 12.0 * L * H * Dh * (T + 1) / 2.0) * B * T * K
    peak = args.peak_gflops if args.peak_gflops else measure_peak_gflops(args.threads)
    env_keys = ("OPENBLAS_CORETYPE", "GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS",
                "OMP_NUM_THREADS", "OPENBLAS_THREAD_TIMEOUT", "ATEN_CPU_CAPABILITY",
                "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                "MALLOC_TOP_PAD_", "GLIBC_TUNABLES", "LD_PRELOAD")
    rec = {
        "impl": "torch", "config": args.config, "passes": K, "recompute": args.recompute,
        "tokens_per_s": round(B * T / med, 1), "step_s_median": round(med, 5),
        "peak_rss_mib": round(peak_rss_mib, 1), "mfu": round(flops / med / (peak * 1e9), 4),
        "readout": "full_logits", "ce": args.ce, "batch": B, "seq_len": T, "threads": args.threads,
        "steps": args.steps, "warmup": args.warmup, "n_params": n_params,
        "model_flops_per_step": flops, "peak_gflops": round(peak, 1),
        "peak_gflops_source": "flag" if args.peak_gflops else "torch.mm 2048^3 best of 3",
        "step_s_all": [round(t, 5) for t in times], "last_losses": [round(l, 5) for l in losses],
        "blas": blas_info(),
        "env": {k: os.environ[k] for k in env_keys if k in os.environ},
    }
    print(json.dumps(rec), flush=True)


# ----------------------------------------------------------------------------- selfcheck
def selfcheck(args):
    """float32 losses and gradients vs the float64 reference (tests/reference/model_ref.py),
    jitter 0; mixin off (segment starts only) and, with our own vectorized mask sampler, on
    (the reference checks the masks against the spec and uses them)."""
    torch.set_num_threads(args.threads)
    set_openblas_threads(args.threads)
    import make_case  # noqa: E402  (from REF_DIR)

    def rel(a, b):
        a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
        nb = np.linalg.norm(b)
        return float(np.linalg.norm(a - b) / nb) if nb > 0 else float(np.linalg.norm(a))

    cases = []
    for i, name in enumerate(sorted(n for n in make_case.PRESETS if n != "random")):
        rng = np.random.default_rng(100 + i)
        cfg, T = make_case.make_config(name, rng)
        cases.append((name, cfg["model"], make_case.make_tokens(cfg["model"], T, rng), rng))
    for i in range(3):
        rng = np.random.default_rng(200 + i)
        cfg, T = make_case.make_config("random", rng)
        cases.append((f"random{i}", cfg["model"], make_case.make_tokens(cfg["model"], T, rng), rng))
    m, _, _ = preset("tiny")          # the benchmark's tiny model itself, short batch
    rng = np.random.default_rng(7)
    cases.append(("tiny_bench_cfg", m, random_tokens(m["vocab_size"], m["eod_id"], 2, 64, rng), rng))

    # variants of our implementation checked on top of the default (ce=lse, recompute none):
    # per case one extra run with F.cross_entropy, one with per-layer checkpointing, and one
    # with ignored targets (ignore_id in the last target column of row 0).
    worst_loss, worst_grad, fails, n = 0.0, 0.0, [], 0
    for ci, (name, mcfg, tokens, rng) in enumerate(cases):
        c = dict(model_ref.DEFAULTS)
        c.update(mcfg)
        c["jitter"], c["prefix_mixin"] = 0.0, False
        arrays = model_ref.init_weights(c, int(rng.integers(1 << 30)))
        for key in arrays:   # non-trivial norm gains
            if arrays[key].ndim == 1:
                arrays[key] = (1.0 + 0.2 * rng.standard_normal(arrays[key].shape)).astype(np.float32)
        tokens = np.asarray(tokens, np.int64)
        B, T = tokens.shape[0], tokens.shape[1] - 1
        runs = [(1, False, "lse", "none", False), (2, False, "lse", "none", False),
                (3, False, "lse", "none", False), (3, True, "lse", "none", False),
                (3, True, "cross_entropy", "none", ci % 2 == 0),
                (2, True, "lse", "full", ci % 2 == 1)]
        for K, mixin, ce, rc, ignore in runs:
            tok = tokens.copy()
            if ignore:
                tok[0, -1] = c["ignore_id"]          # a target only (inputs never hold it)
            masks_np = plain_masks_np(tok[:, :-1], c["eod_id"], K, mixin, rng)
            ref_masks = {k: torch.as_tensor(v) for k, v in masks_np.items()}
            for k, mk in ref_masks.items():
                model_ref.check_plain_mask(c, torch.as_tensor(tok[:, :-1]), mk, f"pass{k}")
            ref = model_ref.grad(c, arrays, tok, K, ref_masks if mixin else None)
            model = Model(c)
            model.load_arrays(arrays)
            st = Step(model, B, T, recompute=rc, ce=ce)
            tt = torch.as_tensor(tok)
            masks = {k: v.unsqueeze(-1) for k, v in ref_masks.items()}
            losses, total = st.losses(tt[:, :-1], tt[:, 1:], K, masks, 0.0)
            total.backward()
            ours = {f"loss.pass{k + 1}": float(l) for k, l in enumerate(losses)}
            ours["loss.total"] = float(total)
            le = max(abs(ours[k] - float(ref[k])) / max(abs(float(ref[k])), 1e-12) for k in ours)
            ge, gk = 0.0, ""
            for key, g in model.grads_by_key().items():
                e = rel(g, ref["grad." + key])
                if e > ge:
                    ge, gk = e, key
            worst_loss, worst_grad, n = max(worst_loss, le), max(worst_grad, ge), n + 1
            ok = le <= 1e-4 and ge <= 1e-4
            if not ok:
                fails.append(name)
            print(f"{'ok  ' if ok else 'FAIL'} {name:15s} K={K} mixin={'on ' if mixin else 'off'} "
                  f"ce={ce:13s} recompute={rc:4s} ignore={'y' if ignore else 'n'}  "
                  f"loss rel err {le:.1e}  worst grad rel err {ge:.1e} ({gk})", flush=True)
    # the prefix-mixin sampler: p ~ Uniform{1..len} per segment (chi-square over 20000 draws of
    # a 10-token segment) and one draw per segment and pass.
    tok = np.zeros((2000, 40), np.int64)
    tok[:, 9] = 1                                   # eod at 9: segments [0, 10) and [10, 40)
    m = plain_masks_np(tok, 1, 3, True, np.random.default_rng(1))
    p = m[2][:, :10].sum(1)
    p = np.concatenate([p, m[3][:, :10].sum(1)])
    counts = np.bincount(p, minlength=11)[1:]
    chi2 = float(((counts - len(p) / 10) ** 2 / (len(p) / 10)).sum())
    prefix_ok = bool((np.diff(m[2][:, :10].astype(int), axis=1) <= 0).all() and m[2][:, 10].all()
                     and counts.sum() == len(p) and np.bincount(p)[0] == 0)
    mix_ok = chi2 < 27.9 and prefix_ok              # chi2(9 dof) 0.999 quantile = 27.88
    print(f"{'ok  ' if mix_ok else 'FAIL'} prefix-mixin sampler: p in 1..10 uniform, chi2(9) = "
          f"{chi2:.1f}, prefixes {'ok' if prefix_ok else 'BAD'}")
    if not mix_ok:
        fails.append("mixin_sampler")
    print(json.dumps({"selfcheck": "pass" if not fails else "FAIL", "runs": n,
                      "worst_loss_rel_err": worst_loss, "worst_grad_rel_err": worst_grad,
                      "tolerance": 1e-4, "mixin_chi2_9dof": round(chi2, 2),
                      "failed": sorted(set(fails))}))
    return 0 if not fails else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="tiny", help="tiny | small | FILE.yaml")
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--recompute", default="none", choices=["none", "full"])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--peak-gflops", type=float, default=0.0)
    ap.add_argument("--batch", type=int, default=0, help="override the batch size")
    ap.add_argument("--seq-len", type=int, default=0, help="override the sequence length")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--foreach", action="store_true", help="AdamW(foreach=True)")
    ap.add_argument("--ce", default="lse", choices=["lse", "cross_entropy"],
                    help="loss on the full logits: one logsumexp shared by CE and z-loss "
                         "(default), or F.cross_entropy + a separate logsumexp")
    ap.add_argument("--verbose", action="store_true", help="per-step times on stderr")
    ap.add_argument("--selfcheck", action="store_true")
    a = ap.parse_args(argv)
    if a.selfcheck:
        return selfcheck(a)
    if a.passes < 1 or a.steps < 1 or a.warmup < 0 or a.threads < 1:
        ap.error("--passes, --steps, --threads must be >= 1 and --warmup >= 0")
    try:
        bench(a)
    except (OSError, ValueError, KeyError, yaml.YAMLError) as ex:
        print(f"torch_train_step: {ex}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
