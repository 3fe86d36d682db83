-- The fencing raise of an election, which also writes the leader's record: KEYS[1] = name,
-- KEYS[2] = counter, KEYS[3] = record; ARGV[1] = value, ARGV[2] = token (the epoch),
-- ARGV[3] = identity. Replies as release.lua does.
--
-- Written in the raise, not after it: a campaign returns only once the raise succeeded on a
-- quorum, so by the time a candidate learns it leads, a quorum already names it. The record is
-- `<epoch> <sha1 of the value> <identity>`: the digest lets a reader tell whether the value that
-- holds the name is the one the record speaks for (read_leader.lua) without the value, a secret
-- that can unlock, ever leaving the node. The record never expires and is never deleted: a
-- reader trusts it only while the name holds that value, so a stale one names nobody.
--- @include "../mutex/raise_counter.lua"
redis.call('SET', KEYS[3], ARGV[2] .. ' ' .. redis.sha1hex(current) .. ' ' .. ARGV[3])
return 1
