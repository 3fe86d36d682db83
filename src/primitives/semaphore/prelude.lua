-- The start of every semaphore script. KEYS[1] = the name: a sorted set of the holders' values,
-- each scored by when it expires (milliseconds on this node's clock), and one more member, the
-- empty string (never a lock value), scored by minus the permit count the holders agreed on. One
-- key holds both, so the count lives and goes exactly as long as the holders do. Defines
-- `refused(reply)`, which turns the error of the first command on the name into one that says what
-- the name holds instead (a Mutex's lock is a string), and `clock()`.
--
-- Time is the node's own (TIME): an entry expires on the clock of the node that holds it, as a key
-- with a TTL does. Redis 7 replicates a script's effects, so TIME is allowed in one.
--
-- The key expires no earlier than its latest holder: its expiry is set with the first holder and
-- only ever moved outwards (`PEXPIREAT ... GT`, Redis 7.0). Were the name to expire first, the node
-- would forget live holders. The last holder to give its permit back deletes it, so a semaphore
-- nobody holds leaves nothing behind; one whose holders expired is gone by the latest expiry.
-- Scripts run on every acquire and release, so each sends as few commands as it can: expired
-- holders are swept only when they could matter (a full node, or another count).

local function refused(reply)
  if type(reply) ~= 'table' or not reply['err'] then return nil end
  local kind = redis.call('TYPE', KEYS[1])['ok']
  if kind == 'zset' then return reply end
  return redis.error_reply('REDMUTEX semaphore "' .. KEYS[1] .. '": the key holds a ' .. kind ..
    ', not the holders of a semaphore (does a Mutex use this name?)')
end
local function clock()
  local time = redis.call('TIME')
  return time[1] * 1000 + math.floor(time[2] / 1000)
end
