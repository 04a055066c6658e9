-- 10^6 calls of a small function.
local function add(a, b) return a + b end
local s = 0
for i = 0, 1000000 - 1 do s = add(s, i) end
print(s)
