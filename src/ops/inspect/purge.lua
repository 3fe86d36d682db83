-- Purge (`Mutex::purge`): deletes what redmutex keeps beside a name once nobody holds it or waits
-- for it. KEYS[1] = the name; KEYS[2..] = the keys kept beside it (its fencing counter, a
-- read-write lock's readers and writer's mark, the fair line, an election's record, the waiters'
-- mark, and on a standalone server the previous layout's counter). ARGV[1] = the index in KEYS of
-- the fair line, 0 where the name has none. Returns -1, deleting nothing, when the name's key
-- exists (a lock, readers' marker or a semaphore's holders) or the line has waiters; else how
-- many keys it deleted.

if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local line = tonumber(ARGV[1])
if line > 0 and redis.call('EXISTS', KEYS[line]) == 1 then return -1 end
if #KEYS < 2 then return 0 end
return redis.call('DEL', unpack(KEYS, 2))
