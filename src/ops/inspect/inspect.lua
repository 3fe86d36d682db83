-- Inspection (`Mutex::inspect`, `RwLock::inspect`, `Semaphore::inspect`): KEYS[1] = name, KEYS[2]
-- = its readers, KEYS[3] = its writer's mark; a name that has no keys beside it (a `}` and no hash
-- tag, which only a plain mutex takes) comes alone. Tells what holds the name, read in one atomic
-- step, as `{kind, pttl, mark-pttl, ...}`: PTTL of the name's key and of the mark (-2 where there
-- is none, -1 without expiry), and by kind
-- - 'string', a lock value (a mutex's or a writer's): its fingerprint;
-- - 'readers' (the name holds the readers' marker): each live reader's fingerprint and remaining
--   milliseconds, in pairs;
-- - 'zset' (a semaphore's holders): the permit count (-1 where the count member is missing), then
--   each live holder's fingerprint and remaining milliseconds, in pairs;
-- - 'none', or the type of a key redmutex never writes there: nothing more.
--
-- A fingerprint is the first 12 hex digits of the value's SHA1: values never leave the node, they
-- are capabilities. Live means scored after the node's own TIME, as the other scripts judge; the
-- count member (the empty string, scored below zero) is never live. A readers key of another type
-- holds no reader (the read scripts fail on it before they write).

local kind = redis.call('TYPE', KEYS[1])['ok']
local reply = {kind, redis.call('PTTL', KEYS[1]), -2}
if KEYS[3] then reply[3] = redis.call('PTTL', KEYS[3]) end
local entries = nil
if kind == 'string' then
  local current = redis.call('GET', KEYS[1])
  if current ~= 'redmutex:readers' then
    reply[4] = string.sub(redis.sha1hex(current), 1, 12)
    return reply
  end
  reply[1] = 'readers'
  if KEYS[2] and redis.call('TYPE', KEYS[2])['ok'] == 'zset' then entries = KEYS[2] end
elseif kind == 'zset' then
  local count = redis.call('ZSCORE', KEYS[1], '')
  reply[4] = count and -tonumber(count) or -1
  entries = KEYS[1]
end
if entries then
  local clock = redis.call('TIME')
  local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
  local live = redis.call('ZRANGEBYSCORE', entries, '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #live, 2 do
    reply[#reply + 1] = string.sub(redis.sha1hex(live[i]), 1, 12)
    reply[#reply + 1] = tonumber(live[i + 1]) - now
  end
end
return reply
