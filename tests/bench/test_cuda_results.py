"""bench/cuda/results.py, which turns a GPU benchmark run into a RESULTS.md
section: a log with known figures gives the verdicts worked out by hand
below; --insert puts the section before the file's first "## "; and,
given hodu and bench_cuda_host (run here on the emulated device), the lines
Hodu's benchmark programs print are the lines the script reads.

    test_cuda_results.py RESULTS_PY FIXTURE_DIR [HODU BENCH_HODU BENCH_CUDA_HOST]
"""
import importlib.util
import os
import subprocess
import sys
import tempfile

# From cuda_bench.log, by hand: 3.94 us <= 5 but 6.95 < 2 x 3.94; 8.10 >=
# 2 x 3.98; 10.7 <= 15; 600.5 < 765; 2600 >= 0.85 x 3012 = 2560.2;
# 50.6 / 51.5 = 98%, 51.1 / 51.3; 645 / 800 = 81%; 820 / 850 = 96%;
# 0.44 > 0.089 ms; 1.371 <= 1.403; no 4096x4096 lines; 0.118 <= 0.312.
EXPECTED = [
    ("`s + t`, 1 element <= 5 us, 2x PyTorch", False),
    ("`relu(b)`, 256 elements <= 5 us, 2x PyTorch", True),
    ("compiled d2l MLP call <= 15 us", True),
    ("eager chain at least PyTorch eager", False),
    ("compiled chain >= 85% of the copy bandwidth", True),
    ("f32 matmul 4096 >= 95% of cuBLAS", True),
    ("f32 matmul 8192 >= 95% of cuBLAS", True),
    ("bf16 matmul 4096 >= 95% of cuBLAS", False),
    ("bf16 matmul 8192 >= 95% of cuBLAS", True),
    ("compiled MLP 256x1024 not slower than eager", False),
    ("compiled MLP 1024x4096 not slower than eager", True),
    ("compiled MLP 4096x4096 not slower than eager", None),
    ("compiled training step not slower than eager", True),
]

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def load(path):
    spec = importlib.util.spec_from_file_location("cuda_results", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read(path):
    with open(path) as f:
        return f.read()


def check_fixture(res, fixtures):
    log = read(os.path.join(fixtures, "cuda_bench.log"))
    tests = read(os.path.join(fixtures, "cuda_ctest.log"))
    text, verdicts = res.section(log, tests, "abc1234", "bench/bench_cuda.sh build-gpu",
                                 "2026-12-07")
    check(verdicts == EXPECTED, f"verdicts {verdicts}")
    for want in ("## CUDA on NVIDIA H100 80GB HBM3 (2026-12-07)",
                 "one **NVIDIA H100 80GB HBM3** (81559 MiB, driver 580.95.05)",
                 "Build: `abc1234`",
                 "463 of 464 passed in 75 s (1 of them skipped)",
                 "- `gpu.device.compiled_loop_state`: failed",
                 "2600.0 GB/s (86% of the copy's rate)",
                 "| bf16 4096 | 645.0 TFLOP/s | 703.0 | 800.0 | 81% | >= 95% | **NOT met** |",
                 "| `s + t`, 1 element | 3.94 us | 6.95 us | 1.76x |",
                 "| `x @ w.T`, 1x512x256 (nn.Linear's layout) | 7.31 us | 14.50 us | 1.98x | | |",
                 "Targets: 8 of 13 met.",
                 "| ms per step | 0.312 | 0.118 | 0.455 | met |",
                 "`cuLaunchKernel` 3.30 us on average, `cuGraphLaunch` 8.50 us",
                 "cuInit=1 cuLaunchKernel=30006 cuGraphLaunch=9999\n",
                 "Parts of the run that failed (their figures are missing): "
                 "`failed: jax_peers: RuntimeError('no GPU left')`.",
                 "Not measured (no figure in the log): compiled MLP 4096x4096",
                 "```\nprofile: mlp 256x1024 compiled, 10 calls\nop                         calls"
                 "    total ms     self ms     mean us   device ms  rate\ncompiled run         "
                 "         10       0.112       0.112       11.20       4.380  0.92 GB/s\n```\n"):
        check(want in text, f"section lacks {want!r}")
    # a test run stopped before its end (a time limit): its progress lines
    text, _ = res.section(log, "\n".join(tests.splitlines()[:4]))
    check("was stopped after 3 of 464 tests: 2 passed (1 of them skipped)." in text and
          "- `gpu.device.compiled_loop_state`: failed" in text, "a stopped test run")
    # a log with nothing in it: every target unmeasured, no exception
    text, verdicts = res.section("", None)
    check(all(ok is None for _, ok in verdicts) and "Targets: 0 of 13 met." in text,
          "an empty log")


def check_insert(res):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "RESULTS.md")
        with open(p, "w") as f:
            f.write("# Benchmark results\n\nIntro.\n\n## Older (2026-11-28)\n\nold\n")
        res.insert(p, "## New (2026-12-07)\n\nnew\n")
        check(read(p) == "# Benchmark results\n\nIntro.\n\n## New (2026-12-07)\n\nnew\n\n"
              "## Older (2026-11-28)\n\nold\n", f"insert gave {read(p)!r}")


def check_programs(res, hodu, bench_hodu, bench_host):
    """The size-independent lines of bench.hodu and bench_cuda_host, and
    profile.hodu's tables as the section shows them."""
    env = {k: v for k, v in os.environ.items() if k != "HODU_EMU_NOLAUNCH"}
    with tempfile.TemporaryDirectory() as d:
        env.setdefault("HODU_CACHE_DIR", os.path.join(d, "cache"))
        out = subprocess.run([hodu, bench_hodu, "smoke"], capture_output=True, text=True,
                             env=env, timeout=600)
        check(out.returncode == 0, f"bench.hodu smoke: {out.stderr}")
        profile = os.path.join(os.path.dirname(bench_hodu), "profile.hodu")
        prof = subprocess.run([hodu, profile, "smoke"], capture_output=True, text=True,
                              env=env, timeout=600)
        check(prof.returncode == 0, f"profile.hodu smoke: {prof.stderr}")
        text, _ = res.section(res.PROFILE_PART + "\n" + prof.stdout)
        for case in ("eager chain", "compiled chain", "mlp 4x32 eager", "mlp 4x32 compiled",
                     "matmul bf16 64"):
            check(f"\nprofile: {case}" in text, f"no profile of {case} in the section")
        check(text.count("device ms") == 5, "profile.hodu: a table without device times")
        host = subprocess.run([bench_host, "50"], capture_output=True, text=True, env=env,
                              timeout=600)
        check(host.returncode == 0, f"bench_cuda_host: {host.stderr}")
    found = res.parse(out.stdout + host.stdout)
    for name in ("eager_chain", "compiled_chain", "small_add", "small_relu", "small_mm",
                 "small_mmt", "small_mlp", "small_mlp_c", "train_e", "train_c", "host_add",
                 "host_relu", "host_mul", "host_call"):
        check(name in found, f"no {name} line in the programs' output")


def main(argv):
    res = load(argv[0])
    check_fixture(res, argv[1])
    check_insert(res)
    if len(argv) >= 5:
        check_programs(res, argv[2], argv[3], argv[4])
    print("FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
