-- Read release: KEYS[1] = name, KEYS[2] = its readers; ARGV[1] = value and, to publish a release
-- notice when the name is freed where a waiter marked it, KEYS[3] = the waiters' mark, ARGV[2] =
-- the command that publishes and (on a cluster) ARGV[3] = the channel, as for the mutex's
-- release_notify.lua. Removes our entry.
--
-- When no live entry is left, deletes the marker and the set (expired entries with it), which
-- frees the name; otherwise sweeps the expired entries (as read_acquire.lua does among readers, and
-- for the same reason; the latest entry is live, so the marker's expiry stays right) and, if ours
-- was the latest entry, lowers the marker's expiry (and the set's) to the latest one left. The
-- name's key is read only where it may change, or where the reply needs it: readers leaving while
-- later ones stay cost five commands, the last reader leaving six.

local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local score = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]))
if score then redis.call('ZREM', KEYS[2], ARGV[1]) end
local latest = tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2])
local live = score and score > now
local freed = not latest or latest <= now
if not freed then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
local current = false
if not live or freed or score > latest then
  current = redis.call('GET', KEYS[1])
  if current == 'redmutex:readers' then
    if freed then
      redis.call('DEL', KEYS[1], KEYS[2])
      if KEYS[3] and redis.call('DEL', KEYS[3]) == 1 then
        redis.call(ARGV[2], ARGV[3] or 'redmutex:released:' .. KEYS[1], ARGV[1])
      end
    elseif score and score > latest then
      redis.call('PEXPIREAT', KEYS[1], latest)
      redis.call('PEXPIREAT', KEYS[2], latest)
    end
  end
end
if live then return 1 end
if current and current ~= 'redmutex:readers' then return -1 end
return 0
