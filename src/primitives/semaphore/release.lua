-- Gives our permit back: ARGV[1] = value and, to publish a release notice where a waiter marked
-- the name (as the mutex's release_notify.lua does, on the same channel), KEYS[2] = the waiters'
-- mark, ARGV[2] = the command that publishes and (on a cluster) ARGV[3] = the channel; KEYS[1] as
-- in prelude.lua. The mark is taken when the notice goes out, as a mutex's release takes it. Returns 1, or 0 when the value held no live permit
-- here (an entry past its expiry is removed, but was no longer ours to give back). The last holder
-- deletes the name, permit count and all.
--- @include "prelude.lua"

local expires = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
local refusal = refused(expires)
if refusal then return refusal end
if not expires then return 0 end
if redis.call('ZCOUNT', KEYS[1], 0, '+inf') == 1 then
  redis.call('DEL', KEYS[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
if tonumber(expires) <= clock() then return 0 end
if KEYS[2] and redis.call('DEL', KEYS[2]) == 1 then
  redis.call(ARGV[2], ARGV[3] or 'redmutex:released:' .. KEYS[1], ARGV[1])
end
return 1
