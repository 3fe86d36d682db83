-- Fenced acquire: `SET name value NX PX expiry`, and on success the name's fencing counter.
-- KEYS[1] = name, KEYS[2] = counter, ARGV[1] = value, ARGV[2] = expiry in milliseconds.
--
-- Returns the counter (0 if never set), or -1 if the name is held. Setting and reading are one
-- atomic step: the counter read is the one in force when the lock was free.

if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end
return -1
