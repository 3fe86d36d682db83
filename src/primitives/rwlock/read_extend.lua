-- Read extend: KEYS[1] = name, KEYS[2] = its readers; ARGV[1] = value, ARGV[2] = expiry in
-- milliseconds. Renews our entry where it is still live, and raises the marker's expiry (and the
-- set's) to the entry's if that is later.

local current = redis.call('GET', KEYS[1])
if current and current ~= 'redmutex:readers' then return -1 end
if not current then return 0 end
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) <= now then return 0 end
local expires = now + ARGV[2]
redis.call('ZADD', KEYS[2], 'XX', expires, ARGV[1])
redis.call('PEXPIREAT', KEYS[1], expires, 'GT')
redis.call('PEXPIREAT', KEYS[2], expires, 'GT')
return 1
