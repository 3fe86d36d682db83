-- A piece of the fair line's scripts: `hand_off(head, place, left)` sets the key to the head's
-- value for what is left of its entry, takes the head out of the line, and names it in a grant
-- notice (sent with the script's `publish`), with the ticket its place had: a round of the head's may pass the key on before the head
-- reads the notice, and put it back in line with another ticket (see `Standing::handed` in
-- standing.rs). Its arguments come from `head_of_line`, so it cannot fail halfway.

local function hand_off(head, place, left)
  local notice = '\0' .. redis.sha1hex(head) .. ' ' .. string.format('%d', (counter())) .. ' '
    .. string.format('%d', place)
  redis.call('SET', KEYS[1], head, 'PX', left)
  redis.call('ZREM', KEYS[2], head)
  redis.call('ZREM', KEYS[3], head)
  publish(notice)
end
