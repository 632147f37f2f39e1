"""The V4-mini layer in idiomatic PyTorch: the same functions as configs/v4-attn.yaml (attention
half), configs/v4-moe.yaml (MoE half) and configs/v4-mini.yaml (the two in a row), on tilerun's
weight names, shapes and layouts, with its loss 0.5·Σ out² (the default of a model without one).

Written from the ops' definitions (kernels/hc.cc, rope.cc, quantize.cc, softmax.cc, swiglu.cc,
counting_sort, grouped_matmul), not by interpreting the YAML: einsum, F.softmax, torch.topk, a
stable sort. Every function works in the dtype of its inputs (fp64 for the tight reference,
fp32 or bf16 otherwise); the constant tables (RoPE, masks) are built once per (T, dtype).

fake_quant rounds through torch.float8_e4m3fn (and an E2M1 rounding for FP4, which torch cannot
cast to) with tilerun's scale rule; its gradient is straight-through, as tilerun's.
"""

import torch
import torch.nn.functional as F

NEG = -1.0e9        # the configs' mask and padding logit
WINDOW = 128        # sliding window: query t sees keys t - 127 .. t
INDEX_DIM = 128     # the lightning indexer's head dim (its Hadamard rotation's size)
ROPE_DIMS = 64      # RoPE on the last 64 dims of a head (32 interleaved pairs)
ROPE_STEP = -0.28782313662425575  # -ln(10000)/32: inv_freq[i] = 10000^(-i/32)
POOL = 4            # compressor: an entry per 4 tokens, pooling 8 candidates
ATTN_SCALE = 0.044194173824159216  # 512^-0.5, the config's (whatever E is)
TOPK, ROUTE_SCALE, SWIGLU_LIMIT = 6, 1.5, 10.0

# name -> (format maximum, significand digits, smallest normal exponent)
FORMATS = {"f8e4m3": (448.0, 4, -6), "fp4e2m1": (6.0, 2, 0)}


# ---- fake quantisation ---------------------------------------------------------------------


def round_e2m1(v):
    """v rounded to FP4 E2M1 (nearest even, saturating at 6): the grid step is 2^(b - 1) in the
    binade [2^b, 2^(b+1)) of |v| (b >= 0: values below 1 share the subnormal step 0.5). The
    binade from frexp (|v| = m·2^e, m in [0.5, 1): b = e - 1), exact where a log2 may not be."""
    _, e = torch.frexp(v.abs().clamp(min=1.0))
    quantum = torch.ldexp(torch.ones_like(v), e - 2)
    return (torch.round(v / quantum) * quantum).clamp(-6.0, 6.0)


def quantise(x, fmt, block, pow2_scale=False):
    """tilerun's fake_quant forward: per block of `block` along the last axis, s = amax / max in
    x's dtype (1 where amax = 0; with pow2_scale the next power of two up), y = round(x / s)·s."""
    top, _, _ = FORMATS[fmt]
    xb = x.reshape(*x.shape[:-1], x.shape[-1] // block, block)
    amax = xb.abs().amax(-1, keepdim=True)
    s = torch.where(amax == 0, torch.ones_like(amax), amax / top)
    if pow2_scale:
        mant, expo = torch.frexp(s)
        s = torch.where(mant == 0.5, s, torch.ldexp(torch.ones_like(s), expo))
    v = xb / s
    if fmt == "f8e4m3":
        # Inputs are within ±448 by the scale; the clamp saturates as tilerun's encoder does.
        r = v.float().clamp(-top, top).to(torch.float8_e4m3fn).to(x.dtype)
    else:
        r = round_e2m1(v)
    return (r * s).reshape(x.shape)


def fake_quant(x, fmt, block, pow2_scale=False, enabled=True):
    """Straight-through: the forward value of quantise, the gradient of the identity."""
    if not enabled:
        return x
    return x + (quantise(x.detach(), fmt, block, pow2_scale) - x).detach()


# ---- shared pieces -------------------------------------------------------------------------


def rmsnorm(x, g, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def rope(x, cos, sin):
    """Rotates the interleaved pairs of x's last ROPE_DIMS dims; x [T, ..., E], tables [T, 32]."""
    shape = (cos.shape[0],) + (1,) * (x.dim() - 2) + (cos.shape[1],)
    cos, sin = cos.reshape(shape), sin.reshape(shape)
    keep, rot = x[..., :-ROPE_DIMS], x[..., -ROPE_DIMS:]
    a, b = rot[..., 0::2], rot[..., 1::2]
    pairs = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return torch.cat([keep, pairs], dim=-1)


def sinkhorn(logits, iters, eps=1e-6):
    """Rows softmaxed, then alternately columns and rows normalised: 2·iters - 1 steps."""
    q = F.softmax(logits, dim=-1) + eps
    q = q / (q.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        q = q / (q.sum(-1, keepdim=True) + eps)
        q = q / (q.sum(-2, keepdim=True) + eps)
    return q


def hc_pre(x, fn, scale, base, iters=20, eps=1e-6, norm_eps=1e-6):
    """mHC pre: x [T, N, D] -> y [T, D], post [T, N], comb [T, N, N] (comb[p, q]: from p to q)."""
    T, N, _ = x.shape
    flat = x.reshape(T, -1)
    r = torch.rsqrt(flat.pow(2).mean(-1, keepdim=True) + norm_eps)
    group_scale = torch.cat([scale[0:1].expand(N), scale[1:2].expand(N), scale[2:3].expand(N * N)])
    a = (flat @ fn) * r * group_scale + base
    pre = torch.sigmoid(a[:, :N]) + eps
    post = 2 * torch.sigmoid(a[:, N:2 * N])
    comb = sinkhorn(a[:, 2 * N:].reshape(T, N, N), iters, eps)
    return torch.einsum("tn,tnd->td", pre, x), post, comb


def hc_post(f, x, post, comb):
    """out[t, q] = post[t, q]·f[t] + Σ_p comb[t, p, q]·x[t, p]."""
    return post[..., None] * f[:, None, :] + torch.einsum("tpq,tpd->tqd", comb, x)


def swiglu(g13, limit=SWIGLU_LIMIT):
    """DeepSeek-V4's clamped SwiGLU over [gate | up] side by side."""
    gate, up = g13.chunk(2, dim=-1)
    return F.silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)


# ---- constants -----------------------------------------------------------------------------


def hadamard(n, dev, dtype):
    """The orthonormal Sylvester Hadamard matrix of size n (a power of two)."""
    h = torch.ones(1, 1, device=dev, dtype=dtype)
    h2 = torch.tensor([[1.0, 1.0], [1.0, -1.0]], device=dev, dtype=dtype)
    while h.shape[0] < n:
        h = torch.kron(h, h2)
    return h * n ** -0.5


def tables(T, C, dev, dtype, window=WINDOW, picks=128):
    """RoPE tables of the tokens and of the compressed entries, the sliding window [T, T] (query
    t sees keys t - window < s <= t), entry c's position 4c + 3 (visible once t >= 4c + 3), the
    indexer's causal mask [T, C] and its Hadamard rotation."""
    inv_freq = torch.exp(torch.arange(ROPE_DIMS // 2, device=dev, dtype=dtype) * ROPE_STEP)
    angle = torch.arange(T, device=dev, dtype=dtype)[:, None] * inv_freq
    cangle = (torch.arange(C, device=dev, dtype=dtype) * POOL + (POOL - 1))[:, None] * inv_freq
    t = torch.arange(T, device=dev)[:, None]
    s = torch.arange(T, device=dev)[None, :]
    cpos = torch.arange(C, device=dev)[None, :] * POOL + (POOL - 1)
    cmask = torch.where(cpos > t, torch.tensor(NEG, dtype=dtype, device=dev),
                        torch.tensor(0.0, dtype=dtype, device=dev))
    return {"cos": torch.cos(angle), "sin": torch.sin(angle), "ccos": torch.cos(cangle),
            "csin": torch.sin(cangle), "window": (s <= t) & (s > t - window),
            "cvisible": cpos <= t, "cmask": cmask, "picks": min(picks, C),
            "hadamard": hadamard(INDEX_DIM, dev, dtype)}


def compress(h, wc, bias):
    """The overlapping compressor: entry c pools tokens 4c-4 .. 4c+3, a softmax per channel
    over the 8 candidates (gate + position bias); wc projects to [values | gate logits]."""
    return compress_projected(h @ wc, bias)


def compress_projected(proj, bias):
    """compress() from the projection [T, 2·width]: values, then gate logits."""
    width = proj.shape[1] // 2
    ckg = proj.reshape(-1, POOL, 2 * width)
    ck, cg = ckg[..., :width], ckg[..., width:]
    ck_prev = F.pad(ck[:-1], (0, 0, 0, 0, 1, 0), value=0.0)
    cg_prev = F.pad(cg[:-1], (0, 0, 0, 0, 1, 0), value=NEG)
    weights = F.softmax(torch.cat([cg_prev, cg], dim=1) + bias, dim=1)
    return (weights * torch.cat([ck_prev, ck], dim=1)).sum(1)


# ---- the halves ----------------------------------------------------------------------------


def attention(x, w, tab, quant=True):
    """configs/v4-attn.yaml's layer `attn`: x [T, N, D] -> (out [T, N, D], the indexer's KL
    loss term); w by weight name."""
    T = x.shape[0]
    H, E = w["sink"].shape[0], w["g_kv"].shape[0]
    G = w["wo_a"].shape[0]
    P = E - ROPE_DIMS

    def fq(v, block):
        return fake_quant(v, "f8e4m3", block, enabled=quant)

    def fq4(v):
        return fake_quant(v, "fp4e2m1", 32, pow2_scale=True, enabled=quant)

    def quantise_nope(v):  # FP8 on the dims RoPE leaves alone
        return torch.cat([fq(v[:, :P], 64), v[:, P:]], dim=1)

    y, post, comb = hc_pre(x, w["hc_fn"], w["hc_scale"], w["hc_base"])
    h = rmsnorm(y, w["g_in"])
    hq = fq(h, 128)

    # Query: q_lora, RMSNorm, FP8, up to H heads; per head an RMS scale and RoPE. One projection
    # of hq gives the query latent and the KV head: wqkv = [wq_a | wkv].
    qa, kv0 = (hq @ w["wqkv"]).split([w["wqkv"].shape[1] - E, E], dim=1)
    qnq = fq(rmsnorm(qa, w["g_q"]), 128)
    qb = qnq @ w["wq_b"]
    q = rope(rmsnorm(qb.view(T, H, E), 1.0), tab["cos"], tab["sin"])

    # One MQA key/value head.
    kv = quantise_nope(rope(rmsnorm(kv0, w["g_kv"]), tab["cos"], tab["sin"]))

    # Compressor: entry c pools tokens 4c-4 .. 4c+3, a softmax per channel over the 8.
    pooled = compress(h, w["wc"], w["c_bias"])
    ckv = quantise_nope(rope(rmsnorm(pooled, w["g_c"]), tab["ccos"], tab["csin"]))

    # Lightning indexer: Hadamard-rotated FP4 queries and keys (its own compressor), ReLU
    # scores weighted per head, the causal mask, the top entries. Its inputs are detached: only
    # its KL term (below) trains it.
    # wi_cw = [the compressor's values | its gates | the head weights].
    IH = w["wi_cw"].shape[1] - 2 * INDEX_DIM
    had = tab["hadamard"]
    qi, hi = qnq.detach(), h.detach()
    iq = fq4(rope((qi @ w["wi_q"]).view(T, IH, INDEX_DIM), tab["cos"], tab["sin"]) @ had)
    ikgw = hi @ w["wi_cw"]
    ipool = compress_projected(ikgw[:, :2 * INDEX_DIM], w["i_bias"])
    ik = fq4(rope(rmsnorm(ipool, w["g_i"]), tab["ccos"], tab["csin"]) @ had)
    iw = ikgw[:, 2 * INDEX_DIM:] * (IH * INDEX_DIM) ** -0.5
    score = torch.einsum("ths,th->ts", torch.einsum("thd,sd->ths", iq, ik).relu(), iw) + tab["cmask"]
    top = torch.topk(score, tab["picks"], dim=-1)
    pick = top.indices
    chosen = torch.zeros_like(tab["cvisible"]).scatter_(1, pick, True) & tab["cvisible"]

    # Attention over the window and the picked entries (a dense mask: the same keys the
    # sparse kernel reads); the sink joins each row's denominator.
    keys = torch.cat([kv, ckv], dim=0)
    seen = torch.cat([tab["window"], chosen], dim=1)
    logits = torch.einsum("thd,sd->hts", q, keys) * ATTN_SCALE
    logits = logits.masked_fill(~seen, float("-inf"))
    sink = w["sink"][:, None, None].expand(H, T, 1)
    p = F.softmax(torch.cat([logits, sink], dim=-1), dim=-1)[..., :-1]
    o = rope(torch.einsum("hts,sd->thd", p, keys), tab["cos"], -tab["sin"])

    # The indexer's KL term: the attention map on its picks (all heads, normalised per token,
    # detached) against its log-softmax over the picked scores; 0 log 0 = 0.
    mass = p.detach().sum(0)[:, T:].gather(1, pick)
    target = mass / (mass.sum(-1, keepdim=True) + 1e-30)
    ilogp = F.log_softmax(top.values, dim=-1)
    seen_t = target > 0
    kl = torch.where(seen_t, target * (torch.log(torch.where(seen_t, target, 1.0)) - ilogp),
                     0.0).sum() / T

    # Grouped output projection through o_lora.
    ol = fq(torch.einsum("tgk,gko->tgo", o.reshape(T, G, -1), w["wo_a"]), 128)
    f = torch.einsum("tgo,god->td", ol, w["wo_b"])
    return hc_post(f, x, post, comb), kl


_GROUPED_MM = {}  # (device type, dtype) -> whether torch's grouped GEMM runs there


def grouped_mm_works(dev, dtype):
    """Whether F.grouped_mm (or torch._grouped_mm) runs forward and backward for this device
    and dtype (versions and GPUs differ), probed once on a tiny case with an empty group."""
    key = (dev.type, dtype)
    if key not in _GROUPED_MM:
        fn = getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
        ok = fn is not None and dtype in (torch.float32, torch.bfloat16)
        if ok:
            try:
                a = torch.ones(8, 16, device=dev, dtype=dtype, requires_grad=True)
                b = torch.ones(3, 16, 16, device=dev, dtype=dtype, requires_grad=True)
                y = fn(a, b.transpose(-2, -1), offs=torch.tensor([3, 3, 8], device=dev, dtype=torch.int32))
                (y * y).sum().backward()
                ok = bool(torch.allclose(y.float(), torch.full_like(y.float(), 16.0)))
            except Exception:  # not built for this device, dtype or GPU
                ok = False
        _GROUPED_MM[key] = ok
    return _GROUPED_MM[key]


def grouped_matmul_t(xs, w, expert_ids, experts):
    """y[r] = xs[r]·w[e]ᵀ for the rows r of expert e's segment (segments in expert order):
    torch's grouped GEMM with the segment ends on the device (no host sync, so a CUDA graph can
    capture it) where it runs, else a loop over the experts (fp64; the loop reads the segment
    sizes on the host, which a CUDA graph cannot capture)."""
    # scatter_add, not bincount: CUDA's bincount reads the largest id on the host.
    counts = torch.zeros(experts, dtype=torch.int64, device=xs.device).scatter_add_(
        0, expert_ids, torch.ones_like(expert_ids))
    if grouped_mm_works(xs.device, xs.dtype):
        fn = getattr(F, "grouped_mm", None) or torch._grouped_mm
        return fn(xs, w.transpose(-2, -1), offs=torch.cumsum(counts, 0).to(torch.int32))
    segments = xs.split(counts.tolist())
    return torch.cat([seg @ w[e].t() for e, seg in enumerate(segments)], dim=0)


def moe(x, w, quant=True):
    """configs/v4-moe.yaml's layer `moe`: x [T, N, D] -> out [T, N, D]; w by weight name."""
    T = x.shape[0]
    XE = w["w_gate"].shape[1]

    def fq8(v):
        return fake_quant(v, "f8e4m3", 128, enabled=quant)

    def fq4(v):
        return fake_quant(v, "fp4e2m1", 32, pow2_scale=True, enabled=quant)

    y, post, comb = hc_pre(x, w["hc_fn"], w["hc_scale"], w["hc_base"])
    h = rmsnorm(y, w["g_ffn"])
    hq = fq8(h)

    # Router: the bias steers the choice only; the weights are the chosen scores renormalised.
    scores = torch.sqrt(F.softplus(h @ w["w_gate"]))
    expert = torch.topk(scores + w["e_bias"], TOPK, dim=-1).indices       # [T, 6]
    chosen = scores.gather(1, expert)
    route_w = chosen / chosen.sum(1, keepdim=True) * ROUTE_SCALE

    # Dispatch: the routes in expert-major order, ties in route order (a stable sort).
    order = torch.sort(expert.flatten(), stable=True).indices
    position = torch.empty_like(order)
    position[order] = torch.arange(order.numel(), device=order.device)
    xs = hq[order // TOPK]
    g13 = grouped_matmul_t(xs, fq4(w["w13"]), expert.flatten(), XE)
    act = swiglu(g13) * route_w.flatten()[order, None]
    ye = grouped_matmul_t(fq8(act), fq4(w["w2"]), expert.flatten(), XE)

    # Combine each token's routes in rank order; the shared expert on the same FP8 rows.
    routed = ye[position.view(T, TOPK)].sum(1)
    shared = fq8(swiglu(hq @ w["ws13"])) @ w["ws2"]
    return hc_post(routed + shared, x, post, comb)


def loss_of(out):
    return 0.5 * out.pow(2).sum()


def model(layers, dims, dev, dtype, quant=True):
    """loss_fn(params, x) -> (loss, out) for layers, a list of ('attn' | 'moe', weight prefix,
    aliases {this file's weight name: the layer's}); params maps tilerun's names (prefix +
    weight) to tensors."""
    tab = (tables(dims["T"], dims.get("C", 1), dev, dtype, dims.get("W", WINDOW), dims.get("KI", 128))
           if any(k == "attn" for k, _, _ in layers) else None)
    if any(k == "moe" for k, _, _ in layers):
        grouped_mm_works(dev, dtype)  # probed here, not while torch.compile traces the model

    def loss_fn(params, x):
        aux = 0.0  # the indexers' KL terms, one per attention half
        for kind, prefix, aliases in layers:
            w = {n[len(prefix):]: v for n, v in params.items() if n.startswith(prefix)}
            w.update({mine: w[theirs] for mine, theirs in aliases.items()})
            if kind == "attn":
                x, kl = attention(x, w, tab, quant)
                aux = aux + kl
            else:
                x = moe(x, w, quant)
        return loss_of(x) + aux, x

    return loss_fn
