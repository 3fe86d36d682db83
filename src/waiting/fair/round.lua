-- A waiter's round: take the lock if it is ours or our turn, else join or stay in line.
--
-- KEYS[1] = name, KEYS[2] = line, KEYS[3] = line expiries, KEYS[4] = ticket counter, KEYS[5] = the
-- waiters' mark, KEYS[6] = where each waiter's grant goes (its client's channel); ARGV[1] = value,
-- ARGV[2] = expiry in milliseconds (of the lock and of the entry), ARGV[3] = the ticket this waiter
-- offers (its ticket in line, once it has one), ARGV[4] = our client's channel for grants; on a
-- Redis Cluster also ARGV[5] and ARGV[6] = the command that publishes notices and the name's notice
-- channel (as for release.lua). A ticket above 2^52 (`TICKET_LIMIT` in scripts.rs) is refused with
-- an error before anything is written.
--
-- A waiter not in line joins with its offer or, if the node gave that ticket or a higher one
-- already, with the next one above them: a later joiner never gets a ticket at or below an earlier
-- one's. A waiter in line whose offer is above its ticket moves back to the offer (so that its
-- tickets agree on every node); it never moves forward. A waiter that holds the key while a waiter
-- ahead of it (by ticket, then value) is in line (it took the key when the line was empty, or it
-- moved back since) passes the key to the head and takes its place behind. Replies {1, 0} when the
-- lock is ours (taken now, or handed to us earlier and extended now), and {0, ticket} when we wait
-- in line, with our ticket on this node (our entry renewed for another expiry). Wherever a line is
-- left when the round ends, so is the waiters' mark (see mark.lua).
--- @include "round_without_line.lua"

local function publish(notice, channel)
  redis.call(ARGV[5] or 'PUBLISH', channel or ARGV[6] or 'redmutex:released:' .. KEYS[1], notice)
end
local offer = tonumber(ARGV[3])
if not offer or offer < 1 or offer > 4503599627370496 or offer % 1 ~= 0 then
  return redis.error_reply('ERR redmutex: a ticket is a whole number from 1 to 2^52')
end
--- @include "clock_and_sweep.lua"
--- @include "head_of_line.lua"
--- @include "counter.lua"
--- @include "hand_off.lua"
--- @include "stand.lua"
--- @include "mark.lua"

local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  local head, place, left = head_of_line()
  if head and (place < offer or (place == offer and head < ARGV[1])) then
    hand_off(head, place, left)
    stand(offer)
    return {0, offer}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[6], ARGV[1])
  keep_mark()
  return {1, 0}
end
if not current then
  local head = head_of_line()
  if not head or head == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('ZREM', KEYS[3], ARGV[1])
    redis.call('HDEL', KEYS[6], ARGV[1])
    keep_mark()
    return {1, 0}
  end
end
local ticket = redis.call('ZSCORE', KEYS[2], ARGV[1])
if ticket then
  ticket = math.max(tonumber(ticket), offer)
else
  ticket = math.max(offer, counter() + 1)
end
stand(ticket)
return {0, ticket}
