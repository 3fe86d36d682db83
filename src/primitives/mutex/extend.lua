-- Compare-and-PEXPIRE: KEYS[1] = name, ARGV[1] = value, ARGV[2] = expiry in milliseconds and, to
-- repair, ARGV[3] = `repair`. Replies as release.lua does; with ARGV[3], where the key is gone,
-- sets it again (`SET NX PX`, our value and expiry) and replies 2. The client counts such a node
-- as one where the lock is gone, and deletes what this set unless the extend holds on a quorum
-- without it (see `Held::extend`), so an expired lock is never re-created.

local current = redis.call('GET', KEYS[1])
if not current then
  if ARGV[3] == 'repair' and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return 2
  end
  return 0
end
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return -1
