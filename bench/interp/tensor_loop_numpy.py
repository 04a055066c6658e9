import numpy as np

x = np.array([0.0], dtype=np.float32)
one = np.array([1.0], dtype=np.float32)
for i in range(1000000):
    x = x + one
print(float(x[0]))
