-- The start of release.lua. Where nobody stands in line on this node, a release is the plain one,
-- with its notice: the same as the rest of the script decides in that case, in three or four
-- commands instead of eight.

if redis.call('EXISTS', KEYS[2]) == 0 then
  local current = redis.call('GET', KEYS[1])
  if not current then return 0 end
  if current ~= ARGV[1] then return -1 end
  redis.call('DEL', KEYS[1])
  publish(ARGV[1])
  return 1
end
