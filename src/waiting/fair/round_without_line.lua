-- The start of round.lua. Where nobody stands in line on this node (no line key: an empty sorted
-- set does not exist), nobody can be ahead of us, so the round is a plain mutex's acquire: `SET
-- NX`, or renewing the key if it is already ours. This costs a round on a name that is free again
-- two commands on the node instead of the line's seven; the rest of the script decides exactly the
-- same in that case. A key held by another sends us to the line.

if redis.call('EXISTS', KEYS[2]) == 0 then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1, 0} end
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, 0}
  end
end
