-- A piece of the fair line's scripts: `head_of_line()`, the head of the line, its ticket, and how
-- long its entry has left (nil for an empty line), looked up before anything that depends on them
-- is written.
--
-- An entry without a deadline (the deadlines' key, or the entry in it, was evicted or deleted)
-- counts as expired and leaves the line here, as the sweep would have taken it out: the sweep finds
-- entries by their deadlines, so nothing else would ever take it out, and every hand-off would fail
-- on it while the line jams behind it.

local function head_of_line()
  while true do
    local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    if not head[1] then return nil end
    local left = math.floor((tonumber(redis.call('ZSCORE', KEYS[3], head[1])) or now) - now)
    if left >= 1 then return head[1], tonumber(head[2]), left end
    redis.call('ZREM', KEYS[2], head[1])
    redis.call('ZREM', KEYS[3], head[1])
    redis.call('HDEL', KEYS[6], head[1])
  end
end
