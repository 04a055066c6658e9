"""Peers for bench_llvm, measured the same way: the d2l MLP (512-256-128-2,
relu, batch 1, 1000 calls; JAX also at batch 64 and 4096), the chain
tanh(a*2+b)*sigmoid(b)-exp(-a) on 16M f32 (GB/s of bytes read and
written), and the time to compile the MLP, in NumPy, PyTorch (eager,
torch.compile) and JAX (jit), for those that are installed. Run by
bench/bench_llvm.sh in the same session."""
import os
import sys
import time

import numpy as np

N = 1 << 24
CALLS = int(sys.argv[1]) if len(sys.argv) > 1 else 1000


def best(fn, reps):
    t = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def calls(fn):
    def run():
        for _ in range(CALLS):
            fn()
    return best(run, 5) / CALLS * 1e6


def params(rng):
    dims = [512, 256, 128, 2]
    ws = [rng.standard_normal((dims[i], dims[i + 1])).astype(np.float32) * 0.05 for i in range(3)]
    bs = [rng.standard_normal(dims[i + 1]).astype(np.float32) * 0.01 for i in range(3)]
    return ws, bs


def chain_inputs():
    i = np.arange(N, dtype=np.int64)
    a = ((i * 7919) % 2001).astype(np.float32) * 1e-3 - 1.0
    b = ((i * 104729) % 3001).astype(np.float32) * 1e-3 - 1.5
    return a, b


def gbs(t):
    return 3 * 4 * N / t * 1e-9


def numpy_peers(ws, bs, x, a, b):
    def mlp():
        h = np.maximum(x @ ws[0] + bs[0], 0)
        h = np.maximum(h @ ws[1] + bs[1], 0)
        return h @ ws[2] + bs[2]
    print(f"numpy mlp: {calls(mlp):.2f} us/call")

    def chain():
        return np.tanh(a * 2 + b) * (1 / (1 + np.exp(-b))) - np.exp(-a)
    print(f"numpy chain: {gbs(best(chain, 5)):.2f} GB/s")
    print(f"numpy light chain: {gbs(best(lambda: (a * 2 + b) * b - a, 5)):.2f} GB/s")


def torch_peers(ws, bs, x, a, b):
    try:
        import torch
    except ImportError:
        print("torch: not installed")
        return
    tw = [torch.from_numpy(w) for w in ws]
    tb = [torch.from_numpy(v) for v in bs]
    tx = torch.from_numpy(x)

    def mlp(x):
        h = torch.relu(x @ tw[0] + tb[0])
        h = torch.relu(h @ tw[1] + tb[1])
        return h @ tw[2] + tb[2]

    def chain(a, b):
        return torch.tanh(a * 2 + b) * torch.sigmoid(b) - torch.exp(-a)

    def light(a, b):
        return (a * 2 + b) * b - a

    ta, tb_ = torch.from_numpy(a), torch.from_numpy(b)
    with torch.no_grad():
        torch.set_num_threads(1)
        print(f"torch {torch.__version__} eager mlp (1 thread): {calls(lambda: mlp(tx)):.2f} us/call")
        for nt in (1, 2):
            torch.set_num_threads(nt)
            print(f"torch eager chain ({nt} threads): {gbs(best(lambda: chain(ta, tb_), 5)):.2f} GB/s")
            print(f"torch eager light chain ({nt} threads): "
                  f"{gbs(best(lambda: light(ta, tb_), 5)):.2f} GB/s")
        try:
            torch.set_num_threads(1)
            cm = torch.compile(mlp)
            t0 = time.perf_counter()
            cm(tx)
            tc = time.perf_counter() - t0
            print(f"torch.compile mlp: first call (compile) {tc * 1e3:.0f} ms, "
                  f"then {calls(lambda: cm(tx)):.2f} us/call (1 thread)")
            cc, cl = torch.compile(chain), torch.compile(light)
            cc(ta, tb_)
            cl(ta, tb_)
            for nt in (1, 2):
                torch.set_num_threads(nt)
                print(f"torch.compile chain ({nt} threads): "
                      f"{gbs(best(lambda: cc(ta, tb_), 5)):.2f} GB/s")
                print(f"torch.compile light chain ({nt} threads): "
                      f"{gbs(best(lambda: cl(ta, tb_), 5)):.2f} GB/s")
        except Exception as e:  # inductor needs a working C++ toolchain
            print(f"torch.compile: failed ({type(e).__name__}: {str(e).splitlines()[0][:100]})")


def jax_peers(ws, bs, x, a, b):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("jax: not installed")
        return
    jw = [jnp.asarray(w) for w in ws]
    jb = [jnp.asarray(v) for v in bs]
    jx = jnp.asarray(x)

    def mlp(x):
        h = jax.nn.relu(x @ jw[0] + jb[0])
        h = jax.nn.relu(h @ jw[1] + jb[1])
        return h @ jw[2] + jb[2]

    jm = jax.jit(mlp)
    t0 = time.perf_counter()
    jm(jx).block_until_ready()
    tc = time.perf_counter() - t0
    print(f"jax {jax.__version__} jit mlp: first call (compile) {tc * 1e3:.0f} ms, "
          f"then {calls(lambda: jm(jx).block_until_ready()):.2f} us/call")

    # the same MLP at bench_llvm's larger batches (its calls: 125 and 5 per
    # 1000), on XLA's threads: compare with bench_llvm's 2-thread rows
    for batch, n in ((64, max(1, CALLS // 8)), (4096, max(1, CALLS // 200))):
        xb = jnp.asarray(np.random.default_rng(1).standard_normal((batch, 512)).astype(np.float32))
        jm(xb).block_until_ready()

        def run():
            for _ in range(n):
                jm(xb).block_until_ready()
        print(f"jax jit mlp batch {batch} (XLA's threads): {best(run, 7) / n * 1e6:.2f} us/call")

    @jax.jit
    def chain(a, b):
        return jnp.tanh(a * 2 + b) * jax.nn.sigmoid(b) - jnp.exp(-a)

    @jax.jit
    def light(a, b):
        return (a * 2 + b) * b - a

    ja, jb2 = jnp.asarray(a), jnp.asarray(b)
    chain(ja, jb2).block_until_ready()
    light(ja, jb2).block_until_ready()
    print(f"jax jit chain (XLA's threads): "
          f"{gbs(best(lambda: chain(ja, jb2).block_until_ready(), 5)):.2f} GB/s")
    print(f"jax jit light chain (XLA's threads): "
          f"{gbs(best(lambda: light(ja, jb2).block_until_ready(), 5)):.2f} GB/s")


def main():
    rng = np.random.default_rng(0)
    ws, bs = params(rng)
    x = rng.standard_normal((1, 512)).astype(np.float32)
    a, b = chain_inputs()
    numpy_peers(ws, bs, x, a, b)
    torch_peers(ws, bs, x, a, b)
    jax_peers(ws, bs, x, a, b)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    main()
