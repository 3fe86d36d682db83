-- Compare-and-delete that also publishes a release notice when it deletes, for mutexes with
-- wake-up on release: KEYS[1] = name, ARGV[1] = value; on a Redis Cluster also ARGV[2] = the
-- command that publishes (`SPUBLISH`) and ARGV[3] = the name's notice channel. Replies as
-- release.lua does.
--
-- Publishing in the same script costs no extra round trip, and a notice is sent exactly when the
-- key went away. The channel and the command come as arguments, never as keys: on a cluster a
-- script may `SPUBLISH` only on a channel of its keys' slot, which the client names
-- (`notice_channel` in `nodes/listener.rs`). Left out, as a standalone server gets the script,
-- they are `PUBLISH` on `redmutex:released:` followed by the name (`NOTICE_PREFIX` in
-- `nodes/listener.rs`; a unit test keeps the two equal): two arguments more would cost every
-- release measurably more work on the node. The message is the released value, which tells one
-- release from the next (see `waiting/hub/line.rs`); it reveals nothing new, as any client of the
-- node could read it with GET while the lock was held.

local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[2] or 'PUBLISH', ARGV[3] or 'redmutex:released:' .. KEYS[1], ARGV[1])
  return 1
end
return -1
