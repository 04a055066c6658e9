-- 10^7 integer additions in a while loop (a compare, two additions per step).
local n = 10000000
local s = 0
local i = 0
while i < n do s = s + i; i = i + 1 end
print(s)
