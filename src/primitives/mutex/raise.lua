-- Raise the fencing counter to the chosen token, only where our value still holds the lock:
-- KEYS[1] = name, KEYS[2] = counter, ARGV[1] = value, ARGV[2] = token. The counter never goes
-- down and never expires. Replies as release.lua does.
--- @include "raise_counter.lua"
return 1
