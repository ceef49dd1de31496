#!/usr/bin/python3
"""Self-checks of model_ref.py that need no C++ side.  Exits non-zero on the first failure.

  1. safetensors round trip; config defaults / coercion.
  2. RoPE against a complex-number formulation; attention masks (window 1, window >= T).
  3. A second, naive numpy reading of docs/MODEL.md (per position, per head loops, complex RoPE)
     gives the same per-pass losses on every make_case preset, with random prefix masks.
  4. torch.autograd.gradcheck of a tiny K=3 model (fast mode over all weights, element by
     element over embed / final_norm / feedback.*); a directional finite difference of the
     total loss on every preset.
  5. Invariants: K=1 total == l_1, l_1 independent of K, mean/sum totals; W_u = 0 => zero
     grads for W_g / norm_g and fused positions enter as zero; all-plain masks => every pass
     equals pass 1 (pass1_input_norm) and zero feedback grads; causality over all passes.
  6. Plain masks: segment starts, validator accepts prefixes and rejects holes / bad starts.
  7. The CLI in-process: init, init-check (ok and failing), grad with/without --mixin-from.
"""
import contextlib, io, math, os, sys, tempfile, time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_case as mc  # noqa: E402
import model_ref as mr  # noqa: E402

F64 = torch.float64
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what)


def close(a, b, tol=1e-10):
    return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(a)), abs(float(b)))


def tW(arrays, grad=False):
    return {k: torch.tensor(np.asarray(v, np.float64), requires_grad=grad) for k, v in arrays.items()}


def case(preset, seed, K=3):
    rng = np.random.default_rng(seed)
    cfg, T = mc.make_config(preset, rng)
    tok = mc.make_tokens(cfg["model"], T, rng)
    c = dict(mr.DEFAULTS)
    c.update(cfg["model"])
    mx = mc.random_mixin(c, tok, K, rng)
    masks = {int(k[len("plain.pass"):]): torch.as_tensor(v != 0) for k, v in mx.items()}
    W = mr.init_weights(c, seed)
    g = np.random.default_rng(seed + 1)  # perturb gains so norm weights matter
    for k in W:
        if mr.init_std(c, k) is None:
            W[k] = (1 + 0.3 * g.standard_normal(W[k].shape)).astype(np.float32)
    W["feedback.w_u.weight"] *= 3  # make the feedback path weigh in
    return c, W, torch.as_tensor(tok.astype(np.int64)), masks


def run(c, W, tok, K, masks=None):
    ls, tot = mr.forward(c, W, tok[:, :-1], tok[:, 1:], K, masks)
    return [float(l) for l in ls], float(tot)


# ----------------------------------------------------------------------------- naive reading
def naive_losses(c, Wn, tokens, K, masks):
    """docs/MODEL.md read again, loop by loop, in numpy. -> per-pass losses."""
    V, D, L, H, Hkv, Dh = (c[k] for k in ("vocab_size", "d_model", "n_layers", "n_heads",
                                          "n_kv_heads", "head_dim"))
    rep, half = H // Hkv, Dh // 2
    r = 1 / math.sqrt(L) if c["depth_scaling"] else 1.0
    rms = lambda v, g: v / np.sqrt(np.mean(v * v) + 1e-6) * g
    sig = lambda z: 1 / (1 + np.exp(-z))
    freq = c["rope_theta"] ** (-(2 * np.arange(half)) / Dh)

    def rot(x, pos):
        z = (x[:half] + 1j * x[half:]) * np.exp(1j * pos * freq)
        return np.concatenate([z.real, z.imag])

    def layer_stack(x):
        T = x.shape[0]
        for l in range(L):
            P = f"layers.{l}."
            full = c["full_attention_every"] > 0 and (l + 1) % c["full_attention_every"] == 0
            win = c["window"] if (c["window"] > 0 and not full) else None
            A = np.stack([rms(x[t], Wn[P + "attn_norm.weight"]) for t in range(T)])
            O = np.zeros((T, H * Dh))
            for h in range(H):
                g = h // rep
                wq = Wn[P + "attn.wq.weight"][h * Dh:(h + 1) * Dh]
                wk = Wn[P + "attn.wk.weight"][g * Dh:(g + 1) * Dh]
                wv = Wn[P + "attn.wv.weight"][g * Dh:(g + 1) * Dh]
                qs, ks, vs = [], [], []
                for t in range(T):
                    q, k = wq @ A[t], wk @ A[t]
                    if c["qk_norm"]:
                        q, k = rms(q, Wn[P + "attn.q_norm.weight"]), rms(k, Wn[P + "attn.k_norm.weight"])
                    qs.append(rot(q, t)), ks.append(rot(k, t)), vs.append(wv @ A[t])
                for t in range(T):
                    allowed = [s for s in range(t + 1) if win is None or s > t - win]
                    sc = np.array([qs[t] @ ks[s] / math.sqrt(Dh) for s in allowed])
                    w = np.exp(sc - sc.max())
                    w /= w.sum()
                    o = sum(wi * vs[s] for wi, s in zip(w, allowed))
                    if c["attn_gate"]:
                        o = o * sig(Wn[P + "attn.wgate.weight"][h] @ A[t])
                    O[t, h * Dh:(h + 1) * Dh] = o
            x = x + r * O @ Wn[P + "attn.wo.weight"].T
            M = np.stack([rms(x[t], Wn[P + "ffn_norm.weight"]) for t in range(T)])
            a1, a3 = M @ Wn[P + "ffn.w1.weight"].T, M @ Wn[P + "ffn.w3.weight"].T
            x = x + r * ((a1 * sig(a1)) * a3) @ Wn[P + "ffn.w2.weight"].T
        return x

    B, T = tokens.shape[0], tokens.shape[1] - 1
    nll, z2, n = np.zeros(K), np.zeros(K), 0
    for b in range(B):
        inp, tgt = tokens[b, :-1], tokens[b, 1:]
        E = Wn["embed.weight"]
        e = E[inp]
        hprev = None
        for k in range(K):
            if k == 0:
                x0 = np.stack([rms(v, Wn["feedback.norm_in.weight"]) for v in e]) if c["pass1_input_norm"] else e
            else:
                rows = []
                for t in range(T):
                    plain = masks[k + 1][b, t] if masks else (t == 0 or inp[t - 1] == c["eod_id"])
                    if plain:
                        u = e[t]
                    else:
                        u = (Wn["feedback.w_u.weight"] @ hprev[t - 1]) * \
                            sig(Wn["feedback.w_g.weight"] @ rms(e[t], Wn["feedback.norm_g.weight"]))
                    rows.append(rms(u, Wn["feedback.norm_in.weight"]))
                x0 = np.stack(rows)
            xL = layer_stack(x0)
            hh = np.stack([rms(v, Wn["final_norm.weight"]) for v in xL])
            for t in range(T):
                if tgt[t] == c["ignore_id"]:
                    continue
                lg = E @ hh[t]
                lse = lg.max() + math.log(np.exp(lg - lg.max()).sum())
                nll[k] += lse - lg[tgt[t]]
                z2[k] += lse * lse
                n += k == 0
            hprev = hh if c["feedback_state"] == "post_norm" else xL
    return list(nll / n + c["z_loss"] * z2 / n)


# ----------------------------------------------------------------------------- checks
def check_io_config(tmp):
    arrs = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.array(3.5, np.float32),
            "i": np.array([[1, -2]], np.int32), "u": np.array([0, 1, 255], np.uint8),
            "d": np.array([1e-300], np.float64)}
    p = os.path.join(tmp, "rt.safetensors")
    mr.st_write(p, arrs, {"k": "v"})
    back, meta = mr.st_read(p)
    check(meta == {"k": "v"} and set(back) == set(arrs) and all(
        back[k].dtype == arrs[k].dtype and back[k].shape == arrs[k].shape and
        np.array_equal(back[k], arrs[k]) for k in arrs), "safetensors round trip")
    with open(p, "rb") as f:
        raw = f.read()
    check((8 + int.from_bytes(raw[:8], "little")) % 8 == 0, "safetensors header padded to 8")
    y = os.path.join(tmp, "m.yaml")
    with open(y, "w") as f:
        f.write("model:\n  z_loss: 1e-5\n  qk_norm: false\n  window: 16\n")
    c = mr.load_config(y)
    check(c["z_loss"] == 1e-5 and c["qk_norm"] is False and c["window"] == 16 and
          c["d_model"] == 1536 and c["full_attention_every"] == 6 and c["feedback_loss"] == "mean",
          "config defaults and coercion")


def check_rope_attention():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 7, 8, generator=g, dtype=F64)
    y = mr.rope(x, 100.0)
    freq = 100.0 ** (-torch.arange(4, dtype=F64) * 2 / 8)
    z = torch.complex(x[..., :4], x[..., 4:]) * torch.polar(torch.ones(7, 4, dtype=F64),
                                                            torch.arange(7, dtype=F64)[:, None] * freq)
    check(torch.allclose(y, torch.cat([z.real, z.imag], -1), atol=1e-13), "RoPE = complex rotation")
    check(torch.allclose(y[..., 0, :], x[..., 0, :]), "RoPE identity at position 0")
    # relative property: <rope(q)_t, rope(k)_s> depends only on t - s
    q, k = torch.randn(8, dtype=F64, generator=g), torch.randn(8, dtype=F64, generator=g)
    Q, Kk = mr.rope(q.expand(7, 8), 100.0), mr.rope(k.expand(7, 8), 100.0)
    check(close(Q[5] @ Kk[3], Q[3] @ Kk[1], 1e-12), "RoPE relative positions")
    # attention masks
    c = dict(mr.DEFAULTS, vocab_size=10, d_model=8, n_layers=2, n_heads=4, n_kv_heads=2,
             head_dim=4, ffn_dim=8, qk_norm=True, attn_gate=False, full_attention_every=2)
    W = tW(mr.init_weights(c, 1))
    a = torch.randn(2, 6, 8, dtype=F64, generator=g)
    v = (a @ W["layers.0.attn.wv.weight"].T).view(2, 6, 2, 4)
    o = mr.attention(dict(c, window=1), W, 0, a).view(2, 6, 4, 4)
    check(torch.allclose(o, v[:, :, [0, 0, 1, 1]], atol=1e-13), "window 1 attends only itself, GQA map h//2")
    o_full = mr.attention(dict(c, window=0), W, 0, a)
    check(torch.allclose(mr.attention(dict(c, window=6), W, 0, a), o_full, atol=1e-13),
          "window >= T equals no window")
    check(not torch.allclose(mr.attention(dict(c, window=3), W, 0, a), o_full), "window 3 differs")
    check(torch.allclose(mr.attention(dict(c, window=1), W, 1, a), mr.attention(dict(c, window=0), W, 1, a), atol=1e-13), "layer 1 full when every=2")
    check(mr.is_windowed(dict(c, window=5, full_attention_every=0), 5) and
          not mr.is_windowed(dict(c, window=5, full_attention_every=3), 2) and
          mr.is_windowed(dict(c, window=5, full_attention_every=3), 3) and
          not mr.is_windowed(dict(c, window=0, full_attention_every=0), 0), "is_windowed")


def check_naive_and_fd():
    for i, preset in enumerate(mc.PRESETS):
        c, Wa, tok, masks = case(preset, 10 + i)
        W = tW(Wa, grad=True)
        ls, tot = mr.forward(c, W, tok[:, :-1], tok[:, 1:], 3, masks)
        ref = naive_losses(c, {k: v.astype(np.float64) for k, v in Wa.items()}, tok.numpy(), 3, masks)
        check(all(close(a, b, 1e-10) for a, b in zip(ls, ref)),
              f"naive reading [{preset}]: {[float(l) for l in ls]} vs {ref}")
        tot.backward()
        g = torch.Generator().manual_seed(i)
        d = {k: torch.randn(w.shape, dtype=F64, generator=g) for k, w in W.items()}
        eps = 1e-6
        f = lambda s: run(c, {k: (w.detach() + s * eps * d[k]) for k, w in W.items()}, tok, 3, masks)[1]
        fd = (f(1) - f(-1)) / (2 * eps)
        an = sum(float((w.grad * d[k]).sum()) for k, w in W.items())
        check(close(fd, an, 1e-6), f"directional finite difference [{preset}]: fd {fd} vs autograd {an}")


def check_gradcheck():
    c = dict(mr.DEFAULTS, vocab_size=7, d_model=4, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=2,
             ffn_dim=6, window=2, full_attention_every=2, eod_id=6, z_loss=1e-2, feedback_state="pre_norm")
    Wa = mr.init_weights(c, 2)
    Wa["feedback.w_u.weight"] *= 3
    tok = torch.tensor([[1, 2, 6, 3, 4, 5, 2], [6, 1, 1, 2, 6, 6, 3]])
    W = tW(Wa)
    for fast, keys in ((True, sorted(Wa)), (False, [k for k in Wa if not k.startswith("layers.")])):
        params = tuple(W[k].clone().requires_grad_() for k in keys)
        fn = lambda *ps: mr.forward(c, dict(W, **dict(zip(keys, ps))), tok[:, :-1], tok[:, 1:], 3)[1]
        check(torch.autograd.gradcheck(fn, params, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=fast),
              f"gradcheck tiny K=3 ({'fast, all weights' if fast else 'every element of embed/final/feedback'})")


def check_invariants():
    c, Wa, tok, masks = case("gqa_window", 5)
    W = tW(Wa)
    l1, t1 = run(c, W, tok, 1)
    l3, t3 = run(c, W, tok, 3, masks)
    check(close(t1, l1[0]) and close(l3[0], l1[0], 1e-13), "K=1 total == l_1; l_1 independent of K")
    check(close(t3, l3[0] + (l3[1] + l3[2]) / 2), "mean total")
    check(close(run(dict(c, feedback_loss="sum"), W, tok, 3, masks)[1], sum(l3)), "sum total")
    check(close(run(dict(c, feedback_state="pre_norm"), W, tok, 3, masks)[0][0], l3[0]) and
          not close(run(dict(c, feedback_state="pre_norm"), W, tok, 3, masks)[0][1], l3[1]),
          "pre_norm changes only passes >= 2")
    # W_u = 0: fused positions enter as RMSNorm(0) = 0; W_g / norm_g get no gradient
    Wz = dict(Wa, **{"feedback.w_u.weight": np.zeros_like(Wa["feedback.w_u.weight"])})
    out = mr.grad(c, Wz, tok, 2, masks)
    check(not np.any(out["grad.feedback.w_g.weight"]) and not np.any(out["grad.feedback.norm_g.weight"])
          and np.any(out["grad.feedback.w_u.weight"]), "W_u = 0: zero grads of W_g, norm_g")
    Wt = tW(Wz)
    e = Wt["embed.weight"][tok[:, :-1]]
    x0 = torch.where(masks[2][..., None], mr.rmsnorm(e, Wt["feedback.norm_in.weight"]), torch.zeros_like(e))
    h = mr.rmsnorm(mr.stack(c, Wt, x0), Wt["final_norm.weight"])
    check(close(out["loss.pass2"], mr.readout_loss(c, Wt, h, tok[:, 1:])), "W_u = 0: pass 2 sees zeros")
    # every position plain: with pass1_input_norm every pass equals pass 1, no feedback grads
    ones = {k: torch.ones_like(m) for k, m in masks.items()}
    out = mr.grad(c, Wa, tok, 3, ones)
    check(close(out["loss.pass2"], out["loss.pass1"], 1e-13) and close(out["loss.pass3"], out["loss.pass1"], 1e-13)
          and not np.any(out["grad.feedback.w_u.weight"]) and not np.any(out["grad.feedback.w_g.weight"]),
          "all plain: passes equal, no feedback grads")
    # pass1_input_norm false: norm_in has no gradient at K=1, but has one at K=2
    c2 = dict(c, pass1_input_norm=False)
    check(not np.any(mr.grad(c2, Wa, tok, 1)["grad.feedback.norm_in.weight"]) and
          np.any(mr.grad(c2, Wa, tok, 2)["grad.feedback.norm_in.weight"]) and
          np.any(mr.grad(c, Wa, tok, 1)["grad.feedback.norm_in.weight"]), "pass1_input_norm false")
    # causality: targets from j on ignored => changing input j changes no pass's loss
    j = 6
    inp, tgt = tok[:, :-1].clone(), tok[:, 1:].clone()
    tgt[:, j:] = -1
    base = [float(l) for l in mr.forward(c, W, inp, tgt, 3, masks)[0]]
    for jj, same in ((j, True), (j - 1, False)):
        inp2 = inp.clone()
        inp2[:, jj] = torch.where(inp[:, jj] == c["eod_id"], inp[:, jj], (inp[:, jj] + 1) % c["eod_id"])
        got = [float(l) for l in mr.forward(c, W, inp2, tgt, 3, masks)[0]]
        check(all(close(a, b, 1e-13) for a, b in zip(base, got)) == same,
              f"causality: change at {jj} {'must not' if same else 'must'} change losses before {j}")
    # ignore_id targets are not counted
    tgt2 = tok[:, 1:].clone()
    tgt2[0, 3] = -1
    full = mr.forward(c, W, tok[:, :-1], tok[:, 1:], 1)[0][0]
    part = mr.forward(c, W, tok[:, :-1], tgt2, 1)[0][0]
    check(not close(full, part), "ignored target changes the mean")


def check_masks():
    c = dict(mr.DEFAULTS, eod_id=9)
    inp = torch.tensor([[1, 9, 2, 3, 9, 9, 4, 5]])
    st = mr.segment_starts(c, inp)
    check(st.tolist() == [[True, False, True, False, False, True, True, False]], "segment starts")

    def ok(m):
        try:
            mr.check_plain_mask(c, inp, torch.tensor([m], dtype=torch.bool), "m")
            return True
        except ValueError:
            return False
    check(ok([1, 0, 1, 0, 0, 1, 1, 0]) and ok([1, 1, 1, 1, 1, 1, 1, 1]) and ok([1, 1, 1, 1, 0, 1, 1, 1]),
          "validator accepts prefixes")
    check(not ok([1, 0, 0, 0, 0, 1, 1, 0]) and not ok([0, 0, 1, 0, 0, 1, 1, 0]) and
          not ok([1, 0, 1, 0, 1, 1, 1, 0]) and not ok([1, 0, 1, 0, 0, 1, 1, 0, 0]),
          "validator rejects bad starts, holes, wrong shape")
    c, Wa, tok, masks = case("random", 3)
    for m in masks.values():
        mr.check_plain_mask(c, tok[:, :-1], m, "random_mixin")  # raises on failure


def cli(args):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            mr.main(args)
        return 0, err.getvalue()
    except SystemExit as ex:
        return ex.code, err.getvalue()


def check_cli(tmp):
    for i, preset in enumerate(mc.PRESETS):
        p = lambda n: os.path.join(tmp, f"{preset}.{n}")
        mc.main(["--config-out", p("yaml"), "--batch-out", p("b"), "--seed", str(i),
                 "--preset", preset, "--mixin-out", p("mx"), "--passes", "3"])
        c = mr.load_config(p("yaml"))
        check(cli(["init", "--config", p("yaml"), "--seed", "7", "--out", p("w")])[0] == 0, "cli init")
        check(cli(["init-check", "--config", p("yaml"), "--weights", p("w"), "--check-stats"])[0] == 0,
              f"init-check [{preset}]")
        t0 = time.time()
        rc, err = cli(["grad", "--config", p("yaml"), "--weights", p("w"), "--batch", p("b"),
                       "--passes", "3", "--out", p("g")])
        check(rc == 0, f"cli grad [{preset}]: {err}")
        g, _ = mr.st_read(p("g"))
        shapes = mr.weight_shapes(c)
        want = {f"loss.pass{k}" for k in (1, 2, 3)} | {"loss.total"} | {"grad." + k for k in shapes}
        check(set(g) == want and all(g["grad." + k].shape == s for k, s in shapes.items()) and
              all(g[k].dtype == np.float32 and g[k].shape == () for k in want if k.startswith("loss."))
              and all(np.all(np.isfinite(v)) for v in g.values()), f"grad output keys/shapes [{preset}]")
        check(abs(float(g["loss.pass1"]) - math.log(c["vocab_size"])) < 0.5, f"init loss ~ ln V [{preset}]")
        # --mixin-from with the segment-start masks == mixin off
        tok, _ = mr.st_read(p("b"))
        st = mr.segment_starts(c, torch.as_tensor(tok["tokens"][:, :-1].astype(np.int64)))
        mr.st_write(p("mx0"), {f"plain.pass{k}": st.numpy().astype(np.uint8) for k in (2, 3)})
        cli(["grad", "--config", p("yaml"), "--weights", p("w"), "--batch", p("b"), "--passes", "3",
             "--mixin-from", p("mx0"), "--out", p("g0")])
        g0, _ = mr.st_read(p("g0"))
        check(all(np.array_equal(g0[k], g[k]) for k in want), f"mixin-from starts == mixin off [{preset}]")
        rc, err = cli(["grad", "--config", p("yaml"), "--weights", p("w"), "--batch", p("b"),
                       "--passes", "3", "--mixin-from", p("mx"), "--out", p("g1")])
        check(rc == 0, f"grad with random mixin [{preset}]: {err}")
    # failures: bad masks, missing / extra / misshaped keys
    bad = {"plain.pass2": np.zeros(st.shape, np.uint8)}
    mr.st_write(p("mxbad"), bad)
    rc, err = cli(["grad", "--config", p("yaml"), "--weights", p("w"), "--batch", p("b"), "--passes", "2",
                   "--mixin-from", p("mxbad"), "--out", p("gx")])
    check(rc != 0 and "not plain" in err, "grad rejects a mask with a non-plain segment start")
    w, _ = mr.st_read(p("w"))
    for name, mod in (("missing", lambda d: d.pop("final_norm.weight")),
                      ("extra", lambda d: d.update({"layers.99.x.weight": np.zeros(2, np.float32)})),
                      ("shape", lambda d: d.update({"feedback.w_u.weight": np.zeros((2, 2), np.float32)}))):
        d = dict(w)
        mod(d)
        mr.st_write(p("wbad"), d)
        rc, err = cli(["init-check", "--config", p("yaml"), "--weights", p("wbad")])
        key = {"missing": "final_norm.weight", "extra": "layers.99.x.weight", "shape": "feedback.w_u.weight"}[name]
        check(rc != 0 and key in err, f"init-check fails on {name} key, naming it")
    d = dict(w, **{"feedback.w_u.weight": w["feedback.w_u.weight"] * 5})
    mr.st_write(p("wbad"), d)
    check(cli(["init-check", "--config", p("yaml"), "--weights", p("wbad"), "--check-stats"])[0] != 0,
          "init-check --check-stats flags a wrong std")


def main():
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for fn in (lambda: check_io_config(tmp), check_rope_attention, check_masks, check_invariants,
                   check_gradcheck, check_naive_and_fd, lambda: check_cli(tmp)):
            fn()
    print(f"selfcheck: {'FAILED ' + str(len(FAILS)) if FAILS else 'all passed'} ({time.time() - t0:.1f} s)")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
