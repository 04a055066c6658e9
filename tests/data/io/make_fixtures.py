#!/usr/bin/env python3
"""Writes the interop fixtures test_io.c reads, with numpy and safetensors as
the independent implementations. Run once from this folder; the outputs are
committed. Versions used: see fixtures.txt (written alongside)."""
import json
import struct

import numpy as np
import safetensors
from safetensors.numpy import save_file

np.save("f32_2x3.npy", np.array([[1.5, -2.0, 3.25], [0.0, 1e-3, -7.5]], dtype="<f4"))
np.save("scalar_f64.npy", np.array(3.5, dtype="<f8"))
np.save("empty_0x3.npy", np.zeros((0, 3), dtype="<f4"))
np.save("bool.npy", np.array([True, False, True, True]))

# Fortran order: a column-major i4 array of arange(24) reshaped (2, 3, 4).
np.save("fortran_i4.npy", np.asfortranarray(np.arange(24, dtype="<i4").reshape(2, 3, 4)))
assert open("fortran_i4.npy", "rb").read().find(b"'fortran_order': True") > 0

# Big-endian and widened integer types.
np.save("be_f8.npy", np.array([[1.0, -2.5, 1e100], [0.25, -0.0, 6.0]], dtype=">f8"))
np.save("be_i2.npy", np.array([-32768, -1, 0, 1, 32767], dtype=">i2"))
np.save("le_u2.npy", np.array([0, 1, 65535], dtype="<u2"))
np.save("le_u4.npy", np.array([0, 2**31, 2**32 - 1], dtype="<u4"))
np.save("be_f2.npy", np.array([1.0, -2.0, 65504.0], dtype=">f2"))
np.save("complex.npy", np.array([1 + 2j], dtype="<c8"))

# Format versions 2.0 and 3.0.
for ver in (2, 3):
    with open("v%d_i8.npy" % ver, "wb") as f:
        np.lib.format.write_array(f, np.arange(-3, 3, dtype="<i8").reshape(2, 3), version=(ver, 0))

# Every Hodu dtype numpy has, stored and compressed.
arrays = {
    "f16": np.array([0.5, -1.25, 65504.0, 6e-8], dtype="<f2"),
    "f32": np.array([[1.0, -2.0], [3.5, 1e30]], dtype="<f4"),
    "f64": np.array([np.pi, -np.e, 1e-300], dtype="<f8"),
    "i8": np.array([-128, -1, 0, 127], dtype="i1"),
    "u8": np.array([0, 1, 200, 255], dtype="u1"),
    "i32": np.array([-2**31, -1, 0, 2**31 - 1], dtype="<i4"),
    "i64": np.array([-2**63, -1, 0, 2**63 - 1], dtype="<i8"),
    "bool": np.array([[True, False], [False, True]]),
    "layer/w": np.arange(6, dtype="<f4").reshape(2, 3),
    "scalar": np.array(-4, dtype="<i8"),
}
np.savez("dtypes.npz", **arrays)
np.savez_compressed("dtypes_deflate.npz", **arrays)

# safetensors by the reference package (numpy frontend: no BF16 there).
st = {
    "f16": arrays["f16"], "f32": arrays["f32"], "f64": arrays["f64"], "i8": arrays["i8"],
    "u8": arrays["u8"], "i32": arrays["i32"], "i64": arrays["i64"], "bool": arrays["bool"],
    "i16": np.array([-300, 300], dtype="<i2"), "u32": np.array([4000000000], dtype="<u4"),
    "empty": np.zeros((2, 0), dtype="<f4"), "scalar": np.array(2.5, dtype="<f4"),
}
save_file(st, "ref.safetensors", metadata={"format": "np", "note": "made by make_fixtures.py"})

# BF16 by hand, following the published format: 1.0, -2.0, 0.5 as bfloat16.
def bf16(x):
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16
data = struct.pack("<3H", bf16(1.0), bf16(-2.0), bf16(0.5))
header = json.dumps({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}).encode()
header += b" " * ((8 - len(header) % 8) % 8)
with open("bf16.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header + data)

with open("fixtures.txt", "w") as f:
    f.write("numpy %s, safetensors %s\n" % (np.__version__, safetensors.__version__))
