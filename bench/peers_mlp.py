"""Peers for bench_mlp, the same model measured the same way: a 3-layer MLP
with GELU (erf form) and a residual connection, forward only, f32,

    h1 = gelu(x @ W1 + b1)
    h2 = gelu(h1 @ W2 + b2) + h1
    y  = h2 @ W3 + b3

at B x I x H x O = 32x256x512x256, 64x512x1024x512, 128x768x2048x1024, 100
warm-up iterations then 5 rounds of 100 timed ones (the best and the worst
round's mean ms per forward), in PyTorch (eager, torch.compile) and JAX
(jit), for those that are installed. Threads: the
first argument (default 2) for PyTorch; XLA sizes its own pool to the
machine's cores.
Run by bench/bench_mlp.sh in the same session.

    python3 bench/peers_mlp.py [threads] [iters] [rounds]"""
import os
import sys
import time

THREADS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
ITERS = int(sys.argv[2]) if len(sys.argv) > 2 else 100
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
SIZES = [(32, 256, 512, 256), (64, 512, 1024, 512), (128, 768, 2048, 1024)]
ONLY = os.environ.get("BENCH_SIZE")

os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))

import numpy as np  # noqa: E402


def params(rng, b, i, h, o):
    def u(shape, scale):
        return (rng.uniform(-1, 1, shape) * scale).astype(np.float32)
    ws = [u((i, h), i ** -0.5), u((h, h), h ** -0.5), u((h, o), h ** -0.5)]
    bs = [u((h,), 0.1), u((h,), 0.1), u((o,), 0.1)]
    return ws, bs, u((b, i), 1.0)


def timed(fn):
    """ITERS warm-up iterations, then ROUNDS rounds of ITERS timed ones:
    the best and the worst round's mean, in ms."""
    times = []
    for r in range(ROUNDS + 1):
        t0 = time.perf_counter()
        for _ in range(ITERS):
            fn()
        if r > 0:
            times.append((time.perf_counter() - t0) / ITERS * 1e3)
    return min(times), max(times)


def report(name, t, flop):
    best, worst = t
    print(f"  {name:<14} {best:9.3f} ms  ({flop / best * 1e-6:6.1f} GFLOPS)  worst {worst:.3f}")


def torch_peers(ws, bs, x, flop):
    try:
        import torch
    except ImportError:
        print("  torch: not installed")
        return
    torch.set_num_threads(THREADS)
    tw = [torch.from_numpy(w) for w in ws]
    tb = [torch.from_numpy(v) for v in bs]
    tx = torch.from_numpy(x)
    gelu = torch.nn.functional.gelu  # approximate='none': the erf form

    def mlp(x):
        h1 = gelu(x @ tw[0] + tb[0])
        h2 = gelu(h1 @ tw[1] + tb[1]) + h1
        return h2 @ tw[2] + tb[2]

    with torch.no_grad():
        report(f"torch {torch.__version__.split('+')[0]} eager", timed(lambda: mlp(tx)), flop)
        try:
            cm = torch.compile(mlp)
            t0 = time.perf_counter()
            cm(tx)
            tc = time.perf_counter() - t0
            report("torch.compile", timed(lambda: cm(tx)), flop)
            print(f"  {'':<14} (first call, compile: {tc * 1e3:.0f} ms)")
            d = (cm(tx) - mlp(tx)).abs().max().item() / mlp(tx).abs().max().item()
            print(f"  {'':<14} (max |compile - eager| / max |eager| = {d:.2g})")
        except Exception as e:  # inductor needs a working C++ toolchain
            print(f"  torch.compile: failed ({type(e).__name__}: {str(e).splitlines()[0][:100]})")


def jax_peers(ws, bs, x, flop):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("  jax: not installed")
        return
    jw = [jnp.asarray(w) for w in ws]
    jb = [jnp.asarray(v) for v in bs]
    jx = jnp.asarray(x)

    def gelu(v):
        return jax.nn.gelu(v, approximate=False)

    @jax.jit
    def mlp(x):
        h1 = gelu(x @ jw[0] + jb[0])
        h2 = gelu(h1 @ jw[1] + jb[1]) + h1
        return h2 @ jw[2] + jb[2]

    t0 = time.perf_counter()
    mlp(jx).block_until_ready()
    tc = time.perf_counter() - t0
    report(f"jax {jax.__version__} jit", timed(lambda: mlp(jx).block_until_ready()), flop)
    print(f"  {'':<14} (first call, compile: {tc * 1e3:.0f} ms)")


def main():
    for k, (b, i, h, o) in enumerate(SIZES):
        if ONLY is not None and int(ONLY) != k:
            continue
        rng = np.random.default_rng(k)
        ws, bs, x = params(rng, b, i, h, o)
        flop = 2.0 * b * (i * h + h * h + h * o)
        print(f"mlp B={b} I={i} H={h} O={o}, {THREADS} threads, {ITERS} iterations x {ROUNDS} "
              "rounds (best, worst)")
        torch_peers(ws, bs, x, flop)
        jax_peers(ws, bs, x, flop)


if __name__ == "__main__":
    main()
