-- Write acquire: KEYS[1] = name, KEYS[2] = its readers, KEYS[3] = its writer's mark, (fenced)
-- KEYS[4] = its counter, and (fenced, on a standalone server) KEYS[5] = its counter where the
-- previous key layout kept it, read as the mutex's acquire_fenced.lua reads it; ARGV[1] = value,
-- ARGV[2] = expiry in milliseconds, ARGV[3] = how long the mark lives in milliseconds (0: no mark).
--
-- Takes the name where it is free: no key (`SET NX`, as a mutex; then no reader is live, since the
-- marker outlives them all), or only the readers' marker with no live entry left (the set is swept
-- first). Where live readers hold, it leaves (or renews) its mark, which new readers respect, and
-- answers -1. A writer that gets in removes the mark, whoever left it: while a writer holds,
-- readers are refused anyway, and a writer still waiting marks again at its next attempt (each
-- attempt may have a value of its own). Returns the counter (0 unfenced), raised to the node's time
-- in microseconds where that is larger (the mutex's clock_floor.lua).
--- @include "../mutex/clock_floor.lua"

local counter = 0
if KEYS[4] then
  counter = tonumber(redis.call('GET', KEYS[4]) or '0')
  if not counter then return redis.error_reply('redmutex: ' .. KEYS[4] .. ' is not a fencing counter') end
  if KEYS[5] then counter = math.max(counter, tonumber(redis.pcall('GET', KEYS[5])) or 0) end
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('GET', KEYS[1]) ~= 'redmutex:readers' then return -1 end
  local clock = redis.call('TIME')
  local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) > 0 then
    if ARGV[3] ~= '0' then redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3]) end
    return -1
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
redis.call('DEL', KEYS[3])
if KEYS[4] then counter = at_least_now(counter) end
return counter
