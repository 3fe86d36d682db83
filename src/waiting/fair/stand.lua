-- A piece of the fair line's scripts: `stand(ticket)` puts our entry (ARGV[1]) in line with
-- `ticket`, renews it for an expiry (ARGV[2]), notes where its grant is to go (ARGV[4], our
-- client's channel), keeps the counter at or above it (and above the line, if it was lost), and
-- keeps the line's keys, and the waiters' mark, as long as its last entry.

local function stand(ticket)
  local latest, kept = counter()
  redis.call('ZADD', KEYS[2], ticket, ARGV[1])
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
  redis.call('HSET', KEYS[6], ARGV[1], ARGV[4])
  if ticket > latest or not kept then
    redis.call('SET', KEYS[4], string.format('%d', math.max(ticket, latest)))
  end
  local last = tonumber(redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2])
  for _, key in ipairs({KEYS[2], KEYS[3], KEYS[4], KEYS[6]}) do
    redis.call('PEXPIREAT', key, last)
  end
  redis.call('PSETEX', KEYS[5], last - now, 1)
end
