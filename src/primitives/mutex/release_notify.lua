-- Compare-and-delete that publishes a release notice where a waiter marked the name (wake-up on
-- release, the default): KEYS[1] = name and, on a Redis Cluster, KEYS[2] = the waiters' mark;
-- ARGV[1] = value, and on a cluster ARGV[2] = the command that publishes (`SPUBLISH`) and ARGV[3]
-- = the name's notice channel. Replies as release.lua does.
--
-- A waiter marks the name when it starts to wait, before its attempt, and again wherever the mark
-- may be gone (`waiters_key` in `engine/target.rs`, `waiting/notices.rs`). The `DEL` that frees the
-- name takes the mark with it and counts both: 2 means somebody waits, and only then does a notice
-- go out. So a release nobody waits for costs the node one more key in its `DEL`, and a release
-- somebody waits for spends the mark (each client that heard the notice marks again with its next
-- attempt). A holder that had to wait itself, and a failed attempt's cleanup, send
-- release_keep.lua instead, which leaves the mark. On a standalone server the mark is the name
-- followed by `:waiters`, made here, so that the node receives the release's arguments of before
-- (`benches/README.md`: one more argument costs a node more than the whole look); on a cluster it
-- is in the name's slot, passed as a key, as are the command and the channel (a script may
-- `SPUBLISH` only on a channel of its keys' slot: `notice_channel` in `nodes/listener.rs`). Left
-- out, they are `PUBLISH` on `redmutex:released:` followed by the name (`NOTICE_PREFIX` in
-- `nodes/listener.rs`; a unit test keeps the two equal). The message is the released value, which
-- tells one release from the next (see `waiting/hub/line.rs`); it reveals nothing new, as any
-- client of the node could read it with GET while the lock was held.

local name = KEYS[1]
local current = redis.call('GET', name)
if current == ARGV[1] then
  if redis.call('DEL', name, KEYS[2] or name .. ':waiters') == 2 then
    redis.call(ARGV[2] or 'PUBLISH', ARGV[3] or 'redmutex:released:' .. name, ARGV[1])
  end
  return 1
end
if current then return -1 end
return 0
