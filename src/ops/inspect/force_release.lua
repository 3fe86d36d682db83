-- Forced release (`force_unlock` of a Mutex, RwLock or Semaphore): deletes a name's keys whatever
-- they hold. KEYS come in threes, a name, its readers (`{<name>}:readers`) and its writer's mark
-- (`{<name>}:writer-waiting`), one three per name; a name that has no keys beside it (a `}` and no
-- hash tag, which only a plain mutex takes) stands in for them itself, and is deleted once. To
-- publish a release notice for each deleted name key as the mutex's release_notify.lua does (with
-- the released value, so waiters tell this release from others), ARGV[1] = the command that
-- publishes and, on a cluster, ARGV[1 + n] = the channel of the n-th name. Returns 1 when a key
-- was deleted, 0 when there was none.
--
-- The name's key goes whatever its type: a lock value, the readers' marker, or a semaphore's
-- sorted set of holders (permit count and all). Where readers held the name (its key holds their
-- marker), their set goes too: otherwise a forced-out reader's entry would outlive the marker, and
-- a reader arriving later would set a marker under which the forced-out one could extend again.
-- The mark goes too: it would refuse new readers for the rest of its life (as long as the expiry
-- with a custom retry delay), although nobody holds the name; a writer still waiting marks again
-- at its next attempt. The fencing counter (`{<name>}:fence`) is another key and stays.

local deleted = 0
for i = 1, #KEYS, 3 do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind ~= 'none' then
    local current = ''
    if kind == 'string' then current = redis.call('GET', KEYS[i]) end
    if current == 'redmutex:readers' then redis.call('DEL', KEYS[i + 1]) end
    redis.call('DEL', KEYS[i])
    if ARGV[1] then
      redis.call(ARGV[1], ARGV[1 + (i + 2) / 3] or 'redmutex:released:' .. KEYS[i], current)
    end
    deleted = 1
  end
  if redis.call('DEL', KEYS[i + 2]) > 0 then deleted = 1 end
end
return deleted
