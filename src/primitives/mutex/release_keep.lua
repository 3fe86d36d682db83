-- Compare-and-delete that leaves the waiters' mark where it finds one and then publishes a release
-- notice flagged as such: the release of a holder that had to wait for the lock, or of a failed
-- attempt's keys, where others likely still wait (see `waiting/notices.rs`). KEYS[1] = name and,
-- on a Redis Cluster, KEYS[2] = the waiters' mark; ARGV[1] = value, ARGV[2] = how many
-- milliseconds the mark lives from now, and on a cluster ARGV[3] = the command that publishes
-- (`SPUBLISH`) and ARGV[4] = the name's notice channel. Replies as release.lua does.
--
-- release_notify.lua's `DEL` takes the mark with the key, and so spends it: each client's waiters
-- mark again after its notice. Here the key goes alone, and `PEXPIRE` gives the mark a waiter's
-- mark's lifetime from now (never less than it had: every mark lives that long from when it was
-- set), its reply telling whether there was one, as the `DEL`'s count does there. The notice is
-- the value after a `+` (a value never holds one), so that the waiters that hear it know the mark
-- is still there and need not set it again. A script of its own, so that the release nobody waits
-- for (release_notify.lua, the common case) does none of this work. Defaults as there: the mark is
-- the name followed by `:waiters` on a standalone server, the notice `PUBLISH` on
-- `redmutex:released:` followed by the name.

local name = KEYS[1]
local current = redis.call('GET', name)
if current == ARGV[1] then
  redis.call('DEL', name)
  if redis.call('PEXPIRE', KEYS[2] or name .. ':waiters', ARGV[2]) == 1 then
    redis.call(ARGV[3] or 'PUBLISH', ARGV[4] or 'redmutex:released:' .. name, '+' .. ARGV[1])
  end
  return 1
end
if current then return -1 end
return 0
