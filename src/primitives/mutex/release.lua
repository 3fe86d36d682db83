-- Compare-and-delete: KEYS[1] = name, ARGV[1] = value.
--
-- Replies 1 when it deleted our value, 0 when the key is gone and -1 when another owner's value
-- holds it (the reply convention of every script but the acquire ones: see `engine/request.rs`).

local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return -1
