-- Writes ARGV[1] to KEYS[1] only if the token ARGV[2] is at least the highest token accepted so
-- far for this key, kept in KEYS[2] (`<key>:last-token`). Returns 1 when written, 0 when refused.
-- Used by `fenced_set` (primitives/fenced.rs), on the protected resource's side.

local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) < last then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1])
return 1
