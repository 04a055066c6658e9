"""Peers of bench/cuda/bench.hodu on the same GPU: PyTorch eager,
torch.compile and jax.jit, synchronized timings (no network needed)."""
import time


def timed(f, reps, sync):
    f()
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        f()
    sync()
    return (time.perf_counter() - t0) / reps


def torch_peers():
    import torch
    sync = torch.cuda.synchronize
    n = 256 * 1024 * 1024
    x = torch.rand(n, device="cuda")
    chain = lambda x: (torch.relu(x * 2.0 + 1.0) * 0.5 - 0.25).sum()
    for name, f in [("eager", chain), ("compile", torch.compile(chain))]:
        s = timed(lambda: f(x), 5, sync)
        print(f"torch {name} chain 256M f32: {2.0 * n * 4 / s / 1e9:.1f} GB/s")
    torch.backends.cuda.matmul.allow_tf32 = False
    for dt in [torch.float32, torch.bfloat16]:
        for m in [4096, 8192]:
            a = torch.randn(m, m, device="cuda", dtype=dt)
            b = torch.randn(m, m, device="cuda", dtype=dt)
            t = timed(lambda: a @ b, 5, sync)
            print(f"torch matmul {dt} {m}: {2.0 * m ** 3 / t / 1e12:.1f} TFLOP/s")
    for batch, width in [(256, 1024), (1024, 4096), (4096, 4096)]:
        xb = torch.randn(batch, width, device="cuda")
        w1 = torch.randn(width, width, device="cuda") * 0.01
        w2 = torch.randn(width, width, device="cuda") * 0.01
        mlp = lambda: (torch.relu(xb @ w1) @ w2).sum()
        cm = torch.compile(lambda xb, w1, w2: (torch.relu(xb @ w1) @ w2).sum())
        print(f"torch eager mlp {batch}x{width}: {timed(mlp, 20, sync) * 1e3:.3f} ms")
        print(f"torch.compile mlp {batch}x{width}: "
              f"{timed(lambda: cm(xb, w1, w2), 20, sync) * 1e3:.3f} ms")


def jax_peers():
    import jax
    import jax.numpy as jnp
    n = 256 * 1024 * 1024
    x = jax.random.uniform(jax.random.PRNGKey(0), (n,))
    chain = jax.jit(lambda x: (jax.nn.relu(x * 2.0 + 1.0) * 0.5 - 0.25).sum())
    s = timed(lambda: chain(x).block_until_ready(), 5, lambda: None)
    print(f"jax.jit chain 256M f32: {2.0 * n * 4 / s / 1e9:.1f} GB/s")
    for batch, width in [(256, 1024), (1024, 4096), (4096, 4096)]:
        k = jax.random.PRNGKey(1)
        xb = jax.random.normal(k, (batch, width))
        w1 = jax.random.normal(k, (width, width)) * 0.01
        w2 = jax.random.normal(k, (width, width)) * 0.01
        mlp = jax.jit(lambda xb, w1, w2: (jax.nn.relu(xb @ w1) @ w2).sum())
        t = timed(lambda: mlp(xb, w1, w2).block_until_ready(), 20, lambda: None)
        print(f"jax.jit mlp {batch}x{width}: {t * 1e3:.3f} ms")


if __name__ == "__main__":
    torch_peers()
    jax_peers()
