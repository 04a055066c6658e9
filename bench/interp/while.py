# 10^7 integer additions in a while loop (a compare, two additions per step).
n = 10000000
s = 0
i = 0
while i < n:
    s = s + i
    i = i + 1
print(s)
