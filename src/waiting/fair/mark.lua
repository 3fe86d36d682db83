-- A piece of the fair line's scripts: `keep_mark()` keeps the waiters' mark (KEYS[5]) for as long
-- as the line has a live entry, so that a release on this node looks at the line (see release.lua:
-- a release that finds no mark takes the plain way, and hands nothing over). The mark goes with the
-- line's last entry, as the line's keys do.

local function keep_mark()
  local last = tonumber(redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2])
  if last and last > now then redis.call('PSETEX', KEYS[5], last - now, 1) end
end
