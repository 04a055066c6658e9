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
    s = timed(lambda: chain(x), 5, sync)
    print(f"torch eager chain 256M f32: {2.0 * n * 4 / s / 1e9:.1f} GB/s (one read, one write)")
    cc = torch.compile(chain)
    s = timed(lambda: cc(x), 5, sync)
    print(f"torch.compile chain 256M f32: {1.0 * n * 4 / s / 1e9:.1f} GB/s read (fused)")
    torch.backends.cuda.matmul.allow_tf32 = False
    for dt in [torch.float32, torch.bfloat16]:
        for m in [4096, 8192]:
            a = torch.randn(m, m, device="cuda", dtype=dt)
            b = torch.randn(m, m, device="cuda", dtype=dt)
            t = timed(lambda: a @ b, 10, sync)
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


def per_call(f, sync, calls=1000):
    """Best of 5 rounds of `calls` calls, each round ended by a sync, in us."""
    for _ in range(10):
        f()
    best = 1e30
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        sync()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def torch_small():
    """bench.hodu's small-tensor section: host time per call."""
    import torch
    sync = torch.cuda.synchronize
    with torch.no_grad():
        s = torch.rand(1, device="cuda")
        t = torch.rand(1, device="cuda")
        b = torch.randn(256, device="cuda")
        xs = torch.randn(1, 512, device="cuda")
        ws = torch.randn(512, 256, device="cuda")
        print(f"torch small s + t, 1 element: {per_call(lambda: s + t, sync):.2f} us")
        print(f"torch small relu(b), 256: {per_call(lambda: torch.relu(b), sync):.2f} us")
        print(f"torch small x @ w, 1x512x256: {per_call(lambda: xs @ ws, sync):.2f} us")
        wl = torch.randn(256, 512, device="cuda")
        print(f"torch small x @ w.T, 1x512x256: {per_call(lambda: xs @ wl.T, sync):.2f} us")
        w1 = torch.randn(512, 256, device="cuda") * 0.05
        b1 = torch.zeros(256, device="cuda")
        w2 = torch.randn(256, 128, device="cuda") * 0.05
        b2 = torch.zeros(128, device="cuda")
        w3 = torch.randn(128, 2, device="cuda") * 0.05
        b3 = torch.zeros(2, device="cuda")
        mlp = lambda x: torch.relu(torch.relu(x @ w1 + b1) @ w2 + b2) @ w3 + b3
        print(f"torch small d2l mlp 512-256-128-2 batch 1, eager: {per_call(lambda: mlp(xs), sync):.2f} us")
        g = torch.cuda.CUDAGraph()
        st = torch.cuda.Stream()
        st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st):
            for _ in range(3):
                mlp(xs)
        torch.cuda.current_stream().wait_stream(st)
        with torch.cuda.graph(g):
            out = mlp(xs)
        print(f"torch small d2l mlp batch 1, CUDA Graph replay: {per_call(g.replay, sync):.2f} us")
        cm = torch.compile(mlp, mode="reduce-overhead")
        print(f"torch small d2l mlp batch 1, torch.compile reduce-overhead: "
              f"{per_call(lambda: cm(xs), sync):.2f} us")


def torch_train():
    """bench.hodu's training step: PyTorch eager (Adam's default, foreach)."""
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                            torch.nn.Linear(256, 10)).cuda()
    opt = torch.optim.Adam(m.parameters(), lr=0.001)
    x = torch.randn(64, 784, device="cuda")
    lab = torch.randint(0, 10, (64,), device="cuda")

    def step():
        loss = torch.nn.functional.cross_entropy(m(x), lab)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss
    t = timed(step, 50, torch.cuda.synchronize)
    print(f"torch train step mlp 784-256-10 batch 64, eager: {t * 1e3:.3f} ms")


def jax_peers():
    import jax
    import jax.numpy as jnp
    n = 256 * 1024 * 1024
    x = jax.random.uniform(jax.random.PRNGKey(0), (n,))
    chain = jax.jit(lambda x: (jax.nn.relu(x * 2.0 + 1.0) * 0.5 - 0.25).sum())
    s = timed(lambda: chain(x).block_until_ready(), 5, lambda: None)
    print(f"jax.jit chain 256M f32: {1.0 * n * 4 / s / 1e9:.1f} GB/s read (fused)")
    for batch, width in [(256, 1024), (1024, 4096), (4096, 4096)]:
        k = jax.random.PRNGKey(1)
        xb = jax.random.normal(k, (batch, width))
        w1 = jax.random.normal(k, (width, width)) * 0.01
        w2 = jax.random.normal(k, (width, width)) * 0.01
        mlp = jax.jit(lambda xb, w1, w2: (jax.nn.relu(xb @ w1) @ w2).sum())
        t = timed(lambda: mlp(xb, w1, w2).block_until_ready(), 20, lambda: None)
        print(f"jax.jit mlp {batch}x{width}: {t * 1e3:.3f} ms")


if __name__ == "__main__":
    # a peer that fails (a missing compiler for torch.compile, say) is
    # reported, and the others still run
    for part in (torch_small, torch_train, torch_peers, jax_peers):
        try:
            part()
        except Exception as e:  # noqa: BLE001
            print(f"!! failed: {part.__name__}: {e!r}", flush=True)
