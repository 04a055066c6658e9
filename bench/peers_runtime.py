"""NumPy figures for the same measurements as bench_elementwise and
bench_matmul: 1-element add overhead, 16M-element f32 add and exp, and f32
matmul GFLOPS. Run by bench/bench_runtime.sh in the same session."""
import time

import numpy as np


def best(fn, reps):
    t = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def main():
    a = np.ones(1, dtype=np.float32)
    n = 100000
    t = best(lambda: [np.add(a, a) for _ in range(n)], 5) / n
    print(f"numpy 1-element f32 add: {t * 1e9:.0f} ns/op")
    n = 1 << 24
    x = (np.arange(n, dtype=np.float32) % 1000) * 1e-3
    y = np.ones(n, dtype=np.float32)
    out = np.empty(n, dtype=np.float32)
    t = best(lambda: np.add(x, y, out=out), 10)
    print(f"numpy 16M f32 add (preallocated out): {3 * 4 * n / t * 1e-9:.2f} GB/s")
    t = best(lambda: x + y, 10)
    print(f"numpy 16M f32 add (fresh out): {3 * 4 * n / t * 1e-9:.2f} GB/s")
    t = best(lambda: np.exp(x), 10)
    print(f"numpy 16M f32 exp (fresh out): {2 * 4 * n / t * 1e-9:.2f} GB/s")
    for m in (256, 1024, 2048):
        p = np.random.rand(m, m).astype(np.float32)
        q = np.random.rand(m, m).astype(np.float32)
        t = best(lambda: p @ q, 5 if m < 2048 else 3)
        print(f"numpy f32 matmul {m}: {2 * m ** 3 / t * 1e-9:.1f} GFLOPS")


if __name__ == "__main__":
    main()
