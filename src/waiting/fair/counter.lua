-- A piece of the fair line's scripts: `counter()`, the highest ticket the node gave, and whether
-- its counter said so.
--
-- Where the counter is gone (evicted, deleted) or holds no ticket (see `TICKET_LIMIT` in
-- scripts.rs), the highest ticket still in line stands in for it: those are the waiters a joiner
-- must stay behind, and `stand` writes it back. A counter that is there is never below a ticket in
-- line: entries join the line only through `stand`, which raises it first.

local function counter()
  local counter = tonumber(redis.call('GET', KEYS[4]) or '')
  if counter and counter >= 0 and counter <= 4503599627370496 then
    return math.floor(counter), true
  end
  return tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2] or '0') or 0, false
end
