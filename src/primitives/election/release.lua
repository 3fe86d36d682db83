-- An election's release (a leader resigns, or a campaign's failed attempt cleans up): the mutex's
-- release_notify.lua, with the same keys and arguments, but the notice goes out whether or not a
-- waiter marked the name. Watchers of the election (`Election::watch`) make no attempts, hence no
-- marks, and a resignation is what they are told of at once. Elections release seldom, so the
-- notice nobody may hear costs little.

local name = KEYS[1]
local current = redis.call('GET', name)
if current == ARGV[1] then
  redis.call('DEL', name, KEYS[2] or name .. ':waiters')
  redis.call(ARGV[2] or 'PUBLISH', ARGV[3] or 'redmutex:released:' .. name, ARGV[1])
  return 1
end
if current then return -1 end
return 0
