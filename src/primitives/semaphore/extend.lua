-- Renews our permit's expiry, only while it is live: ARGV[1] = value, ARGV[2] = expiry in
-- milliseconds (KEYS[1] as in prelude.lua). Returns 1, or 0 when the value holds no live permit
-- here (never re-creates one).
--- @include "prelude.lua"

local expires = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
local refusal = refused(expires)
if refusal then return refusal end
if not expires then return 0 end
local now = clock()
if tonumber(expires) <= now then return 0 end
local renewed = now + ARGV[2]
redis.call('ZADD', KEYS[1], 'XX', renewed, ARGV[1])
redis.call('PEXPIREAT', KEYS[1], renewed, 'GT')
return 1
