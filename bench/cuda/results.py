"""The figures of a bench/bench_cuda.sh run as a bench/RESULTS.md section.

    python3 bench/cuda/results.py LOG [--tests CTEST_LOG] [--commit C]
                                      [--command CMD] [--insert RESULTS.md]

LOG is everything bench_cuda.sh printed (its own lines, ref.cu's,
bench.hodu's, peers_cuda.py's and bench_cuda_host's). The section has the
GPU's name, the date, the commit and the command, then one table per part
with the GPU targets beside each figure: met, NOT met, or not measured when
a line is missing (a part that failed prints no figure; the section says
so instead of stopping). With --insert the section goes into that file
before its first "## " heading (the newest results first); without it, to
standard output.
"""
import argparse
import datetime
import math
import os
import re
import sys

NUM = r"([0-9.eE+-]+)"

# name -> pattern of the line that holds the figure (first group)
PATTERNS = {
    "gpu": r"^(NVIDIA [^,]+|[A-Z][^,]*GPU[^,]*), ([0-9]+ MiB), ([0-9.]+)$",
    "copy": r"^d2d copy 256M f32: " + NUM + " GB/s",
    "eager_chain": r"^eager chain [0-9]+ f32: " + NUM + " GB/s",
    "compiled_chain": r"^compiled chain [0-9]+ f32: " + NUM + " GB/s",
    "torch_chain": r"^torch eager chain 256M f32: " + NUM + " GB/s",
    "torch_compile_chain": r"^torch\.compile chain 256M f32: " + NUM + " GB/s",
    "jax_chain": r"^jax\.jit chain 256M f32: " + NUM + " GB/s",
    "small_add": r"^small s \+ t, 1 element: " + NUM + " us",
    "small_relu": r"^small relu\(b\), 256: " + NUM + " us",
    "small_mm": r"^small x @ w, 1x512x256: " + NUM + " us",
    "small_mmt": r"^small x @ w\.T, 1x512x256: " + NUM + " us",
    "small_mlp": r"^small d2l mlp 512-256-128-2 batch 1, eager: " + NUM + " us",
    "small_mlp_c": r"^small d2l mlp 512-256-128-2 batch 1, compiled: " + NUM + " us",
    "torch_add": r"^torch small s \+ t, 1 element: " + NUM + " us",
    "torch_relu": r"^torch small relu\(b\), 256: " + NUM + " us",
    "torch_mm": r"^torch small x @ w, 1x512x256: " + NUM + " us",
    "torch_mmt": r"^torch small x @ w\.T, 1x512x256: " + NUM + " us",
    "torch_mlp": r"^torch small d2l mlp 512-256-128-2 batch 1, eager: " + NUM + " us",
    "torch_graph": r"^torch small d2l mlp batch 1, CUDA Graph replay: " + NUM + " us",
    "torch_ro": r"^torch small d2l mlp batch 1, torch\.compile reduce-overhead: " + NUM + " us",
    "train_e": r"^train step mlp [0-9-]+ batch [0-9]+, eager: " + NUM + " ms",
    "train_c": r"^train step mlp [0-9-]+ batch [0-9]+, compiled: " + NUM + " ms",
    "torch_train": r"^torch train step mlp 784-256-10 batch 64, eager: " + NUM + " ms",
    "host_add": r"^\s+add\(x, y\)\s+" + NUM + " us/op",
    "host_relu": r"^\s+relu\(x\)\s+" + NUM + " us/op",
    "host_mul": r"^\s+mul\(\[4,1\], \[1,4\]\)\s+" + NUM + " us/op",
    "host_call": r"^\s+call\s+" + NUM + " us/call",
}
for dt, tdt in (("f32", "torch.float32"), ("bf16", "torch.bfloat16")):
    for m in (4096, 8192):
        PATTERNS[f"mm_{dt}_{m}"] = rf"^matmul {dt} {m}: {NUM} TFLOP/s"
        PATTERNS[f"cublas_{dt}_{m}"] = rf"^cuBLAS {dt} {m}: {NUM} TFLOP/s"
        PATTERNS[f"torch_mm_{dt}_{m}"] = rf"^torch matmul {re.escape(tdt)} {m}: {NUM} TFLOP/s"
MLPS = ("256x1024", "1024x4096", "4096x4096")
for s in MLPS:
    PATTERNS[f"mlp_{s}"] = rf"^mlp {s}: {NUM} ms"
    PATTERNS[f"mlp_c_{s}"] = rf"^mlp compiled {s}: {NUM} ms"
    PATTERNS[f"torch_mlp_{s}"] = rf"^torch eager mlp {s}: {NUM} ms"
    PATTERNS[f"torch_compile_mlp_{s}"] = rf"^torch\.compile mlp {s}: {NUM} ms"
    PATTERNS[f"jax_mlp_{s}"] = rf"^jax\.jit mlp {s}: {NUM} ms"


def parse(text):
    """The figures found in a log: name -> float (the GPU: its CSV line)."""
    found = {}
    for line in text.splitlines():
        for name, pat in PATTERNS.items():
            if name in found:
                continue
            m = re.search(pat, line)
            if not m:
                continue
            if name == "gpu":
                found[name] = (m.group(1), m.group(2), m.group(3))
            else:
                try:
                    v = float(m.group(1))
                except ValueError:
                    continue
                if math.isfinite(v) and v > 0:  # a failed timing is no figure
                    found[name] = v
    return found


def fmt(v, digits=1, unit=""):
    """v with digits decimals and its unit, or "-" where it was not measured."""
    return "-" if v is None else f"{v:.{digits}f}{unit}"


def verdict(ok):
    if ok is None:
        return "not measured"
    return "met" if ok else "**NOT met**"


def parse_shim(text):
    """The counts and mean times of the driver shim's last line, by name."""
    lines = [ln for ln in text.splitlines() if ln.startswith("cudashim:")]
    found = {}
    for word in lines[-1].split()[1:] if lines else []:
        name, _, val = word.partition("=")
        try:
            found[name] = float(val)
        except ValueError:
            pass
    return found


class Section:
    def __init__(self, f, shim=None):
        self.f = f
        self.shim = shim or {}
        self.lines = []
        self.verdicts = []

    def get(self, name):
        return self.f.get(name)

    def out(self, s=""):
        self.lines.append(s)

    def target(self, what, ok):
        self.verdicts.append((what, ok))
        return verdict(ok)


def both(*vals):
    return all(v is not None for v in vals)


def small_table(s):
    s.out("Host time per call, small tensors (best of 5 rounds of 1000 calls, each")
    s.out("round ended by a wait for the GPU):")
    s.out()
    s.out("| measurement | Hodu | PyTorch eager | Hodu faster by | target | |")
    s.out("|---|---|---|---|---|---|")
    for key, tkey, label in (("small_add", "torch_add", "`s + t`, 1 element"),
                             ("small_relu", "torch_relu", "`relu(b)`, 256 elements")):
        h, t = s.get(key), s.get(tkey)
        ok = (h <= 5.0 and t >= 2.0 * h) if both(h, t) else None
        ratio = f"{t / h:.2f}x" if both(h, t) and h > 0 else "-"
        s.out(f"| {label} | {fmt(h, 2, ' us')} | {fmt(t, 2, ' us')} | {ratio} | <= 5 us and 2x PyTorch | "
              f"{s.target(label + ' <= 5 us, 2x PyTorch', ok)} |")
    for key, tkey, label in (("small_mm", "torch_mm", "`x @ w`, 1x512x256"),
                             ("small_mmt", "torch_mmt", "`x @ w.T`, 1x512x256 (nn.Linear's layout)"),
                             ("small_mlp", "torch_mlp", "d2l MLP 512-256-128-2, batch 1, eager")):
        h, t = s.get(key), s.get(tkey)
        ratio = f"{t / h:.2f}x" if both(h, t) and h > 0 else "-"
        s.out(f"| {label} | {fmt(h, 2, ' us')} | {fmt(t, 2, ' us')} | {ratio} | | |")
    h, g, ro = s.get("small_mlp_c"), s.get("torch_graph"), s.get("torch_ro")
    ok = h <= 15.0 if h is not None else None
    s.out(f"| the same MLP compiled (one CUDA Graph) | {fmt(h, 2, ' us')} | CUDA Graph replay "
          f"{fmt(g, 2, ' us')}; `torch.compile(mode=\"reduce-overhead\")` {fmt(ro, 2, ' us')} | "
          f"{(f'{g / h:.2f}x (replay)' if both(h, g) and h > 0 else '-')} | <= 15 us | "
          f"{s.target('compiled d2l MLP call <= 15 us', ok)} |")
    s.out()
    a, r, m, c = (s.get(k) for k in ("host_add", "host_relu", "host_mul", "host_call"))
    s.out(f"`bench_cuda_host` on the real driver, without waiting: eager `add` {fmt(a, 2)} "
          f"us/op, `relu` {fmt(r, 2)}, a broadcasting `mul` {fmt(m, 2)}; the compiled MLP "
          f"16-16-16-2 call {fmt(c, 2)} us.")
    s.out()
    if s.shim:
        launch, graph = (s.shim.get(f"{n}_mean_ns") for n in ("cuLaunchKernel", "cuGraphLaunch"))
        s.out("The same program through a shim that counts and times the driver's calls: "
              f"`cuLaunchKernel` {fmt(launch / 1e3 if launch else None, 2, ' us')} on average, "
              f"`cuGraphLaunch` {fmt(graph / 1e3 if graph else None, 2, ' us')}; every count:")
        s.out()
        s.out("```")
        s.out(" ".join(f"{k}={v:g}" for k, v in s.shim.items() if not k.endswith("_ns")))
        s.out("```")
        s.out()


def bandwidth_table(s):
    # The copy's figure counts the bytes read and written; a stream that
    # only reads, as the fused chain does, can move bytes at that rate too,
    # so the compiled chain's target is 85% of it (2.5 TB/s on an H100 whose
    # copy ran at 3.0).
    copy = s.get("copy")
    s.out("| measurement | Hodu | PyTorch eager | `torch.compile` | `jax.jit` | target | |")
    s.out("|---|---|---|---|---|---|---|")
    e, te = s.get("eager_chain"), s.get("torch_chain")
    ok = e >= te if both(e, te) else None
    s.out(f"| chain `sum(relu(x*2+1)*0.5-0.25)`, 256M f32, eager, 2·n·4 bytes/s | "
          f"{fmt(e, 1, ' GB/s')} | {fmt(te)} | - | - | at least PyTorch eager | "
          f"{s.target('eager chain at least PyTorch eager', ok)} |")
    c, tc, jc = s.get("compiled_chain"), s.get("torch_compile_chain"), s.get("jax_chain")
    ok = c >= 0.85 * copy if both(c, copy) else None
    pct = f" ({100 * c / copy:.0f}% of the copy's rate)" if both(c, copy) else ""
    s.out(f"| the same chain compiled, bytes read/s | {fmt(c, 1, ' GB/s')}{pct} | - | {fmt(tc)} | "
          f"{fmt(jc)} | >= 85% of the copy's {fmt(copy, 1, ' GB/s')} | "
          f"{s.target('compiled chain >= 85% of the copy bandwidth', ok)} |")
    s.out()
    s.out(f"Reference: a device-to-device copy of 256M f32 at {fmt(copy, 1, ' GB/s')} "
          "(bytes read + written).")
    s.out()


def matmul_table(s):
    s.out("| matmul | Hodu | PyTorch eager | cuBLAS called directly | Hodu / cuBLAS | target | |")
    s.out("|---|---|---|---|---|---|---|")
    for dt in ("f32", "bf16"):
        for m in (4096, 8192):
            h, t, r = (s.get(f"{p}_{dt}_{m}") for p in ("mm", "torch_mm", "cublas"))
            ok = h >= 0.95 * r if both(h, r) else None
            pct = f"{100 * h / r:.0f}%" if both(h, r) and r > 0 else "-"
            s.out(f"| {dt} {m} | {fmt(h, 1, ' TFLOP/s')} | {fmt(t)} | {fmt(r)} | {pct} | >= 95% | "
                  f"{s.target(f'{dt} matmul {m} >= 95% of cuBLAS', ok)} |")
    s.out()


def mlp_table(s):
    s.out("| MLP forward | Hodu eager | Hodu compiled | PyTorch eager | `torch.compile` | "
          "`jax.jit` | compiled not slower than eager |")
    s.out("|---|---|---|---|---|---|---|")
    for size in MLPS:
        e, c, t, tc, j = (s.get(f"{p}_{size}") for p in
                          ("mlp", "mlp_c", "torch_mlp", "torch_compile_mlp", "jax_mlp"))
        ok = c <= e if both(e, c) else None
        s.out(f"| {size} | {fmt(e, 3, ' ms')} | {fmt(c, 3, ' ms')} | {fmt(t, 3)} | {fmt(tc, 3)} | "
              f"{fmt(j, 3)} | {s.target(f'compiled MLP {size} not slower than eager', ok)} |")
    s.out()
    s.out("JAX multiplies f32 in TF32 by default; Hodu and PyTorch do not.")
    s.out()


def train_table(s):
    e, c, t = (s.get(n) for n in ("train_e", "train_c", "torch_train"))
    s.out("| training step, MLP 784-256-10 batch 64 (dropout, cross_entropy, Adam) | Hodu eager | "
          "Hodu compiled | PyTorch eager | compiled not slower than eager |")
    s.out("|---|---|---|---|---|")
    ok = c <= e if both(e, c) else None
    s.out(f"| ms per step | {fmt(e, 3)} | {fmt(c, 3)} | {fmt(t, 3)} | "
          f"{s.target('compiled training step not slower than eager', ok)} |")
    s.out()


PROFILE_PART = "== where the device time goes (the profiler)"


def profile_block(s, log):
    """The profiler's tables (bench/cuda/profile.hodu), as printed."""
    lines = log.splitlines()
    if PROFILE_PART not in lines:
        return
    body = []
    for ln in lines[lines.index(PROFILE_PART) + 1:]:
        if ln.startswith("== ") or ln.startswith("!! failed"):
            break
        body.append(ln.rstrip())
    if not any(ln.startswith("profile: ") for ln in body):
        return
    s.out("Where the device time went (`bench/cuda/profile.hodu`: the profiler's host and "
          "device times per op, events on the stream around each op and compiled run):")
    s.out()
    s.out("```")
    s.lines.extend(body)
    s.out("```")
    s.out()


PROGRESS = re.compile(r"^\s*\d+/(\d+) Test\s+#\d+: (\S+) \.*\s*(\*\*\*)?(\w+)", re.M)


def tests_paragraph(s, text):
    """What a ctest log says: its summary, or its progress lines where it
    was stopped before the end; then each test that did not pass."""
    runs = PROGRESS.findall(text)
    bad = [(name, word) for _, name, _, word in runs if word not in ("Passed", "Skipped")]
    skipped = sum(1 for *_, word in runs if word == "Skipped")
    m = re.search(r"(\d+)% tests passed, (\d+) tests? failed out of (\d+)", text)
    t = re.search(r"Total Test time \(real\) =\s+([0-9.]+) sec", text)
    secs = f" in {float(t.group(1)):.0f} s" if t else ""
    if m:
        failed, total = int(m.group(2)), int(m.group(3))
        s.out(f"**Tests.** `ctest -L '^cuda$'` on the GPU: {total - failed} of {total} passed{secs}"
              f" ({skipped} of them skipped).")
    elif runs:
        s.out(f"**Tests.** `ctest -L '^cuda$'` on the GPU was stopped after {len(runs)} of "
              f"{runs[0][0]} tests: {len(runs) - len(bad)} passed ({skipped} of them skipped).")
    else:
        s.out("**Tests.** No CTest summary in the log.")
    for name, word in bad:
        s.out(f"- `{name}`: {word.lower()}")
    s.out()


def section(log, tests=None, commit=None, command=None, date=None):
    s = Section(parse(log), parse_shim(log))
    gpu = s.get("gpu")
    name = gpu[0] if gpu else "an unnamed GPU"
    date = date or datetime.date.today().isoformat()
    s.out(f"## CUDA on {name} ({date})")
    s.out()
    machine = f"one **{name}** ({gpu[1]}, driver {gpu[2]})" if gpu else "a GPU not named in the log"
    s.out(f"Machine: {machine}, {os.cpu_count()} host cores. Build: `{commit or 'unknown'}`. "
          f"Command: `{command or 'bench/bench_cuda.sh BUILD_DIR'}` (PyTorch, JAX and nvcc on "
          "the same GPU, in the same run). Every timing queues its repetitions and waits once.")
    s.out()
    failed = [ln[3:].strip() for ln in log.splitlines() if ln.startswith("!! failed")]
    if failed:
        s.out("Parts of the run that failed (their figures are missing): " +
              "; ".join(f"`{f}`" for f in failed) + ".")
        s.out()
    if tests is not None:
        tests_paragraph(s, tests)
    small_table(s)
    bandwidth_table(s)
    matmul_table(s)
    mlp_table(s)
    train_table(s)
    profile_block(s, log)
    missed = [w for w, ok in s.verdicts if ok is False]
    unknown = [w for w, ok in s.verdicts if ok is None]
    s.out(f"Targets: {sum(1 for _, ok in s.verdicts if ok)} of {len(s.verdicts)} met.")
    if missed:
        s.out("Not met: " + "; ".join(missed) + ".")
    if unknown:
        s.out("Not measured (no figure in the log): " + "; ".join(unknown) + ".")
    s.out()
    return "\n".join(s.lines), s.verdicts


def insert(path, text):
    """Put text before the first '## ' heading of path."""
    with open(path) as f:
        old = f.read()
    at = old.find("\n## ")
    new = old + "\n" + text if at < 0 else old[:at + 1] + text + "\n" + old[at + 1:]
    with open(path, "w") as f:
        f.write(new)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--tests")
    ap.add_argument("--commit")
    ap.add_argument("--command")
    ap.add_argument("--date")
    ap.add_argument("--insert")
    a = ap.parse_args(argv)
    with open(a.log, errors="replace") as f:
        log = f.read()
    tests = None
    if a.tests:
        with open(a.tests, errors="replace") as f:
            tests = f.read()
    text, _ = section(log, tests, a.commit, a.command, a.date)
    if a.insert:
        insert(a.insert, text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
