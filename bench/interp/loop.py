# 10^7 integer additions in a counted loop.
n = 10000000
s = 0
for i in range(n):
    s = s + i
print(s)
