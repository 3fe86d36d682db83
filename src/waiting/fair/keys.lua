-- A piece of the fair release: the line's keys, where the client left them out. A standalone
-- server's release names the lock key alone (its request is the plain mutex's, byte for byte: see
-- release.lua), and the keys beside it are made here from the name as `beside` in
-- `engine/target.rs` makes them: the name in braces, or the name and one more colon for a name with
-- a hash tag of its own; the waiters' mark is the name followed by `:waiters` (`waiters_key`). A
-- cluster member's release passes every key, in the name's slot. Only releases that found the
-- waiters' mark come here, so a release nobody waits for never pays for this.

if not KEYS[2] then
  local name = KEYS[1]
  local prefix = '{' .. name .. '}'
  local open = string.find(name, '{', 1, true)
  local close = open and string.find(name, '}', open + 1, true)
  if close and close > open + 1 then prefix = name .. ':' end
  KEYS[2] = prefix .. ':line'
  KEYS[3] = prefix .. ':line:until'
  KEYS[4] = prefix .. ':ticket'
  KEYS[5] = name .. ':waiters'
  KEYS[6] = prefix .. ':line:to'
end
