import sys

import numpy as np

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000000
x = np.array([0.0], dtype=np.float32)
one = np.array([1.0], dtype=np.float32)
for i in range(n):
    x = x + one
print(float(x[0]))
