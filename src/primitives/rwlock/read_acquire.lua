-- Read acquire: KEYS[1] = name, KEYS[2] = its readers, KEYS[3] = its writer's mark; ARGV[1] =
-- value, ARGV[2] = expiry in milliseconds.
--
-- Readers are a sorted set scored by when each entry expires on this node's own clock (TIME). A
-- reader is refused while a writer (or a mutex) holds the name or a writer waits (its mark).
-- Otherwise its entry goes in, and the name's key holds the readers' marker (`redmutex:readers`,
-- `READERS_MARKER` in Rust), its expiry (and the set's) raised to the entry's if that is later
-- (GT): the marker lives as long as the latest live entry, so `SET NX` of a writer fails
-- meanwhile. Where the marker is missing, no entry is live (the marker outlives them all), and the
-- set's expiry is set outright.
--
-- Where other readers hold (the marker is there), expired entries are swept first, in one
-- ZREMRANGEBYSCORE up to now (no dearer than looking whether any expired). Otherwise the entries
-- of readers that vanished without a release (a crash, a lock dropped outside a runtime, a release
-- that timed out) would stay for as long as readers keep overlapping and no writer tries: the set
-- goes only with the last reader. read_release.lua sweeps for the same reason. Where the marker is
-- missing, no entry is live and the set went with the marker (both expire with the latest entry),
-- so a reader alone pays for no sweep. Sweeping changes no decision: every script compares scores
-- with the clock, so an expired entry counts for nothing whether it is still there or not.
--
-- Each command a script calls costs the node more than the work it does, so this one calls few:
-- MGET reads the name and the mark at once, and `SET NX` keeps a key of another type at the name
-- (which MGET reads as missing) from being overwritten (the entry goes in first, so that a readers
-- key of another type fails the script before it wrote anything). Lua passes numbers as `%.14g`,
-- exact for these 13-digit times.

local current = redis.call('MGET', KEYS[1], KEYS[3])
if current[1] and current[1] ~= 'redmutex:readers' then return -1 end
if current[2] then return -1 end
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local expires = now + ARGV[2]
if current[1] then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
redis.call('ZADD', KEYS[2], expires, ARGV[1])
if current[1] then
  redis.call('PEXPIREAT', KEYS[1], expires, 'GT')
elseif not redis.call('SET', KEYS[1], 'redmutex:readers', 'NX', 'PXAT', expires) then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return redis.error_reply('redmutex: ' .. KEYS[1] .. ' holds a key of another type')
end
-- GT never gives a key without expiry one: a set made anew under a marker (which the other
-- scripts never leave behind) must not live for ever.
if not current[1] or (redis.call('PEXPIREAT', KEYS[2], expires, 'GT') == 0
    and redis.call('PTTL', KEYS[2]) == -1) then
  redis.call('PEXPIREAT', KEYS[2], expires)
end
return 0
