-- A piece of the fair line's scripts: `hand_off(head, place, left)` sets the key to the head's
-- value for what is left of its entry, takes the head out of the line, and names it in a grant
-- notice with the ticket its place had (a round of the head's may pass the key on before the head
-- reads the notice, and put it back in line with another ticket: see `Standing::handed` in
-- standing.rs). The notice goes to the head's client alone, on the channel its round left in the
-- line (`<prefix>:line:to`), so that a hand-off costs one notice per node however many clients
-- wait; where the line has none (a waiter of an older client, or a lost key), on the name's notice
-- channel, which every waiting client hears. Its arguments come from `head_of_line`, so it cannot
-- fail halfway.

local function hand_off(head, place, left)
  local notice = '\0' .. redis.sha1hex(head) .. ' ' .. string.format('%d', (counter())) .. ' '
    .. string.format('%d', place)
  local to = redis.call('HGET', KEYS[6], head)
  redis.call('SET', KEYS[1], head, 'PX', left)
  redis.call('ZREM', KEYS[2], head)
  redis.call('ZREM', KEYS[3], head)
  redis.call('HDEL', KEYS[6], head)
  publish(notice, to)
end
