-- A piece of the fair line's scripts: `stand(ticket)` puts our entry (ARGV[1]) in line with
-- `ticket`, renews it for an expiry (ARGV[2]), keeps the counter at or above it (and above the
-- line, if it was lost), and keeps the line's keys as long as its last entry.

local function stand(ticket)
  local latest, kept = counter()
  redis.call('ZADD', KEYS[2], ticket, ARGV[1])
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
  if ticket > latest or not kept then
    redis.call('SET', KEYS[4], string.format('%d', math.max(ticket, latest)))
  end
  local last = tonumber(redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2])
  for i = 2, 4 do
    redis.call('PEXPIREAT', KEYS[i], last)
  end
end
