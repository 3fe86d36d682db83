-- A piece of the fair line's scripts (each script runs on its own, so each carries its pieces):
-- `now`, the node's clock in milliseconds, and the sweep of expired entries (and of where their
-- grants were to go).

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('ZREM', KEYS[2], gone)
  redis.call('ZREM', KEYS[3], gone)
  redis.call('HDEL', KEYS[6], gone)
end
