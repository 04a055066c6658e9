-- 10^7 integer additions in a counted loop.
local n = 10000000
local s = 0
for i = 0, n - 1 do s = s + i end
print(s)
