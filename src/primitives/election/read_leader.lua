-- Who leads, as one node sees it: KEYS[1] = name, KEYS[2] = record.
--
-- Replies `{epoch, identity, milliseconds left}` when the name holds the value the record was
-- written for (raise_lead.lua), and an empty array otherwise: nobody leads here, or the record
-- is a former leader's.

local current = redis.call('GET', KEYS[1])
if not current then return {} end
local record = redis.call('GET', KEYS[2])
if not record then return {} end
local epoch, digest, identity = string.match(record, '^(%d+) (%x+) (.*)$')
if not epoch or digest ~= redis.sha1hex(current) then return {} end
return {epoch, identity, redis.call('PTTL', KEYS[1])}
