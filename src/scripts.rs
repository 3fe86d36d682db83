//! The Lua scripts that act on a lock's keys on one node, atomically.
//!
//! One reply convention for all of them (see `node::Request::interpret`): an acquire script answers
//! the fencing counter (`0` or more; `0` where none was asked for) when it took the lock and `-1`
//! when another owner holds it; every other script answers `1` when it acted on our value, `0` when
//! the lock is gone and `-1` when another owner's value holds it, so the caller can tell an expired
//! lock from a taken one. Anything else is an error reply with a message. Only acquire scripts
//! create keys: a lock that expired stays expired.
//!
//! Scripts check everything before they write: Redis does not undo a script's writes when it
//! fails halfway.

use std::sync::LazyLock;

pub(crate) mod fair;

/// Compare-and-delete: `KEYS[1]` = name, `ARGV[1]` = value.
pub(crate) const RELEASE: &str = r#"
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return -1
"#;

/// The pub/sub channel of a name's release notices is this prefix followed by the name. The
/// script below spells it out too; a unit test keeps the two equal.
pub(crate) const NOTICE_PREFIX: &str = "redmutex:released:";

/// Compare-and-delete that also publishes a release notice when it deletes, for mutexes with
/// wake-up on release: `KEYS[1]` = name, `ARGV[1]` = value. Publishing in the same script costs no
/// extra round trip, and a notice is sent exactly when the key went away. The message is the
/// released value, which tells one release from the next (see `wake`); it reveals nothing new, as
/// any client of the node could read it with GET while the lock was held.
pub(crate) const RELEASE_NOTIFY: &str = r#"
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', 'redmutex:released:' .. KEYS[1], ARGV[1])
  return 1
end
return -1
"#;

/// Compare-and-PEXPIRE: `KEYS[1]` = name, `ARGV[1]` = value, `ARGV[2]` = expiry in milliseconds.
pub(crate) const EXTEND: &str = r#"
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return -1
"#;

/// Fenced acquire: `SET name value NX PX expiry`, and on success the name's fencing counter.
/// `KEYS[1]` = name, `KEYS[2]` = counter, `ARGV[1]` = value, `ARGV[2]` = expiry in milliseconds.
/// Returns the counter (0 if never set), or `-1` if the name is held. Setting and reading are one
/// atomic step: the counter read is the one in force when the lock was free.
pub(crate) const ACQUIRE_FENCED: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end
return -1
"#;

/// Raise the fencing counter to the chosen token, only where our value still holds the lock:
/// `KEYS[1]` = name, `KEYS[2]` = counter, `ARGV[1]` = value, `ARGV[2]` = token. The counter never
/// goes down and never expires.
pub(crate) const RAISE: &str = r#"
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current ~= ARGV[1] then return -1 end
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
if counter < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
"#;

/// What the name's key holds while readers hold a read-write lock: a value no lock ever has
/// (`settings::check_value` refuses it), so `SET NX` of a writer or a plain mutex fails, and no
/// compare-and-act script ever takes it for its own. The scripts below spell it out too; a unit
/// test keeps them equal.
pub(crate) const READERS_MARKER: &str = "redmutex:readers";

/// Multi-name acquire: every name or none. `KEYS` = the names, then (fenced) their counters in
/// the same order; `ARGV[1]` = value, `ARGV[2]` = expiry in milliseconds, `ARGV[3]` = `1` if
/// fenced. Sets nothing unless every name is free here, so no node ever holds part of a
/// multi-name lock. Returns the highest counter of the names (0 unfenced), or `-1`.
///
/// Each command a script calls costs the node more than the work it does here, so the names are
/// checked in one `EXISTS` (in slices: Lua's `unpack` has a bounded stack).
pub(crate) const NAMES_ACQUIRE: &str = r#"
local names = #KEYS
if ARGV[3] == '1' then names = names / 2 end
for first = 1, names, 1000 do
  if redis.call('EXISTS', unpack(KEYS, first, math.min(first + 999, names))) > 0 then return -1 end
end
local counter = 0
for i = names + 1, #KEYS do
  local n = tonumber(redis.call('GET', KEYS[i]) or '0')
  if not n then return redis.error_reply('redmutex: ' .. KEYS[i] .. ' is not a fencing counter') end
  if n > counter then counter = n end
end
for i = 1, names do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return counter
"#;

/// Multi-name compare-and-PEXPIRE: `KEYS` = the names, `ARGV[1]` = value, `ARGV[2]` = expiry in
/// milliseconds. Acts only where every name still holds our value: a node that lost one key
/// does not hold the lock. The names are read in one `MGET` per slice of 1000.
pub(crate) const NAMES_EXTEND: &str = r#"
local verdict = 1
for first = 1, #KEYS, 1000 do
  local current = redis.call('MGET', unpack(KEYS, first, math.min(first + 999, #KEYS)))
  for i = 1, #current do
    if not current[i] then verdict = 0 elseif current[i] ~= ARGV[1] then return -1 end
  end
end
if verdict == 0 then return 0 end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1
"#;

/// Multi-name compare-and-delete: `KEYS` = the names, `ARGV[1]` = value, `ARGV[2]` = `1` to
/// publish a release notice for each name freed. Deletes every name that holds our value (one
/// `MGET` and one `DEL` per slice of 1000); answers `1` only if all of them did.
pub(crate) const NAMES_RELEASE: &str = r#"
local result = 1
for first = 1, #KEYS, 1000 do
  local last = math.min(first + 999, #KEYS)
  local current = redis.call('MGET', unpack(KEYS, first, last))
  local ours = {}
  for i = 1, #current do
    if current[i] == ARGV[1] then
      ours[#ours + 1] = KEYS[first + i - 1]
    elseif current[i] then
      result = -1
    elseif result == 1 then
      result = 0
    end
  end
  if #ours > 0 then
    redis.call('DEL', unpack(ours))
    if ARGV[2] == '1' then
      for i = 1, #ours do
        redis.call('PUBLISH', 'redmutex:released:' .. ours[i], ARGV[1])
      end
    end
  end
end
return result
"#;

/// Multi-name fencing raise: `KEYS` = the names, then their counters; `ARGV[1]` = value,
/// `ARGV[2]` = token. Raises every name's counter, only where every name holds our value.
pub(crate) const NAMES_RAISE: &str = r#"
local names = #KEYS / 2
local verdict = 1
for i = 1, names do
  local current = redis.call('GET', KEYS[i])
  if not current then verdict = 0 elseif current ~= ARGV[1] then return -1 end
end
if verdict == 0 then return 0 end
local token = tonumber(ARGV[2])
local counters = {}
for i = names + 1, #KEYS do
  counters[i] = tonumber(redis.call('GET', KEYS[i]) or '0')
  if not counters[i] then return redis.error_reply('redmutex: ' .. KEYS[i] .. ' is not a fencing counter') end
end
for i = names + 1, #KEYS do
  if counters[i] < token then redis.call('SET', KEYS[i], ARGV[2]) end
end
return 1
"#;

/// Read acquire: `KEYS[1]` = name, `KEYS[2]` = its readers, `KEYS[3]` = its writer's mark;
/// `ARGV[1]` = value, `ARGV[2]` = expiry in milliseconds.
///
/// Readers are a sorted set scored by when each entry expires on this node's own clock (`TIME`).
/// A reader is refused while a writer (or a mutex) holds the name or a writer waits (its mark).
/// Otherwise its entry goes in, and the name's key holds the readers' marker, its expiry (and
/// the set's) raised to the entry's if that is later (`GT`): the marker lives as long as the
/// latest live entry, so `SET NX` of a writer fails meanwhile. Where the marker is missing, no
/// entry is live (the marker outlives them all), and the set's expiry is set outright.
///
/// Where other readers hold (the marker is there), expired entries are swept first, in one
/// `ZREMRANGEBYSCORE` up to now (no dearer than looking whether any expired). Otherwise the entries
/// of readers that vanished without a release (a crash, a lock dropped outside a runtime, a release
/// that timed out) would stay for as long as readers keep overlapping and no writer tries: the set
/// goes only with the last reader. `READ_RELEASE` sweeps for the same reason. Where the marker is
/// missing, no entry is live and the set went with the marker (both expire with the latest entry),
/// so a reader alone pays for no sweep. Sweeping changes no decision: every script compares scores
/// with the clock, so an expired entry counts for nothing whether it is still there or not.
///
/// Each command a script calls costs the node more than the work it does, so this one calls few:
/// `MGET` reads the name and the mark at once, and `SET NX` keeps a key of another type at the
/// name (which `MGET` reads as missing) from being overwritten (the entry goes in first, so that
/// a readers key of another type fails the script before it wrote anything). Lua passes numbers
/// as `%.14g`, exact for these 13-digit times.
pub(crate) const READ_ACQUIRE: &str = r#"
local current = redis.call('MGET', KEYS[1], KEYS[3])
if current[1] and current[1] ~= 'redmutex:readers' then return -1 end
if current[2] then return -1 end
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local expires = now + ARGV[2]
if current[1] then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
redis.call('ZADD', KEYS[2], expires, ARGV[1])
if current[1] then
  redis.call('PEXPIREAT', KEYS[1], expires, 'GT')
elseif not redis.call('SET', KEYS[1], 'redmutex:readers', 'NX', 'PXAT', expires) then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return redis.error_reply('redmutex: ' .. KEYS[1] .. ' holds a key of another type')
end
-- GT never gives a key without expiry one: a set made anew under a marker (which the other
-- scripts never leave behind) must not live for ever.
if not current[1] or (redis.call('PEXPIREAT', KEYS[2], expires, 'GT') == 0
    and redis.call('PTTL', KEYS[2]) == -1) then
  redis.call('PEXPIREAT', KEYS[2], expires)
end
return 0
"#;

/// Read extend: `KEYS[1]` = name, `KEYS[2]` = its readers; `ARGV[1]` = value, `ARGV[2]` = expiry
/// in milliseconds. Renews our entry where it is still live, and raises the marker's expiry (and
/// the set's) to the entry's if that is later.
pub(crate) const READ_EXTEND: &str = r#"
local current = redis.call('GET', KEYS[1])
if current and current ~= 'redmutex:readers' then return -1 end
if not current then return 0 end
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) <= now then return 0 end
local expires = now + ARGV[2]
redis.call('ZADD', KEYS[2], 'XX', expires, ARGV[1])
redis.call('PEXPIREAT', KEYS[1], expires, 'GT')
redis.call('PEXPIREAT', KEYS[2], expires, 'GT')
return 1
"#;

/// Read release: `KEYS[1]` = name, `KEYS[2]` = its readers; `ARGV[1]` = value, `ARGV[2]` = `1` to
/// publish a release notice when the name is freed. Removes our entry. When no live entry is
/// left, deletes the marker and the set (expired entries with it), which frees the name;
/// otherwise sweeps the expired entries (as `READ_ACQUIRE` does among readers, and for the same
/// reason; the latest entry is live, so the marker's expiry stays right) and, if ours was the
/// latest entry, lowers the marker's expiry (and the set's) to the latest one left. The name's
/// key is read only where it may change, or where the reply needs it: readers leaving while later
/// ones stay cost five commands, the last reader leaving six.
pub(crate) const READ_RELEASE: &str = r#"
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local score = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]))
if score then redis.call('ZREM', KEYS[2], ARGV[1]) end
local latest = tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2])
local live = score and score > now
local freed = not latest or latest <= now
if not freed then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
local current = false
if not live or freed or score > latest then
  current = redis.call('GET', KEYS[1])
  if current == 'redmutex:readers' then
    if freed then
      redis.call('DEL', KEYS[1], KEYS[2])
      if ARGV[2] == '1' then
        redis.call('PUBLISH', 'redmutex:released:' .. KEYS[1], ARGV[1])
      end
    elseif score and score > latest then
      redis.call('PEXPIREAT', KEYS[1], latest)
      redis.call('PEXPIREAT', KEYS[2], latest)
    end
  end
end
if live then return 1 end
if current and current ~= 'redmutex:readers' then return -1 end
return 0
"#;

/// Write acquire: `KEYS[1]` = name, `KEYS[2]` = its readers, `KEYS[3]` = its writer's mark, and
/// (fenced) `KEYS[4]` = its counter; `ARGV[1]` = value, `ARGV[2]` = expiry in milliseconds,
/// `ARGV[3]` = how long the mark lives in milliseconds (0: no mark).
///
/// Takes the name where it is free: no key (`SET NX`, as a mutex; then no reader is live, since
/// the marker outlives them all), or only the readers' marker with no live entry left (the set
/// is swept first). Where live readers hold, it leaves (or renews) its mark, which new readers
/// respect, and answers `-1`. A writer that gets in removes the mark, whoever left it: while a
/// writer holds, readers are refused anyway, and a writer still waiting marks again at its next
/// attempt (each attempt may have a value of its own). Returns the counter (0 unfenced).
pub(crate) const WRITE_ACQUIRE: &str = r#"
local counter = 0
if KEYS[4] then
  counter = tonumber(redis.call('GET', KEYS[4]) or '0')
  if not counter then return redis.error_reply('redmutex: ' .. KEYS[4] .. ' is not a fencing counter') end
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('GET', KEYS[1]) ~= 'redmutex:readers' then return -1 end
  local clock = redis.call('TIME')
  local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) > 0 then
    if ARGV[3] ~= '0' then redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3]) end
    return -1
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
redis.call('DEL', KEYS[3])
return counter
"#;

/// Inspection (`Mutex::inspect`, `RwLock::inspect`, `Semaphore::inspect`): `KEYS[1]` = name,
/// `KEYS[2]` = its readers, `KEYS[3]` = its writer's mark. Tells what holds the name, read in one
/// atomic step, as `{kind, pttl, mark-pttl, ...}`: `PTTL` of the name's key and of the mark (`-2`
/// where there is none, `-1` without expiry), and by kind
/// - `'string'`, a lock value (a mutex's or a writer's): its fingerprint;
/// - `'readers'` (the name holds the readers' marker): each live reader's fingerprint and
///   remaining milliseconds, in pairs;
/// - `'zset'` (a semaphore's holders): the permit count (`-1` where the count member is missing),
///   then each live holder's fingerprint and remaining milliseconds, in pairs;
/// - `'none'`, or the type of a key redmutex never writes there: nothing more.
///
/// A fingerprint is the first 12 hex digits of the value's SHA1: values never leave the node,
/// they are capabilities. Live means scored after the node's own `TIME`, as the other scripts
/// judge; the count member (the empty string, scored below zero) is never live. A readers key of
/// another type holds no reader (the read scripts fail on it before they write).
pub(crate) const INSPECT: &str = r#"
local kind = redis.call('TYPE', KEYS[1])['ok']
local reply = {kind, redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[3])}
local entries = nil
if kind == 'string' then
  local current = redis.call('GET', KEYS[1])
  if current ~= 'redmutex:readers' then
    reply[4] = string.sub(redis.sha1hex(current), 1, 12)
    return reply
  end
  reply[1] = 'readers'
  if redis.call('TYPE', KEYS[2])['ok'] == 'zset' then entries = KEYS[2] end
elseif kind == 'zset' then
  local count = redis.call('ZSCORE', KEYS[1], '')
  reply[4] = count and -tonumber(count) or -1
  entries = KEYS[1]
end
if entries then
  local clock = redis.call('TIME')
  local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
  local live = redis.call('ZRANGEBYSCORE', entries, '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #live, 2 do
    reply[#reply + 1] = string.sub(redis.sha1hex(live[i]), 1, 12)
    reply[#reply + 1] = tonumber(live[i + 1]) - now
  end
end
return reply
"#;

/// Forced release (`force_unlock` of a `Mutex`, `RwLock` or `Semaphore`): deletes a name's keys
/// whatever they hold. `KEYS` come in threes, a name, its readers (`<name>:readers`) and its
/// writer's mark (`<name>:writer-waiting`), one three per name; `ARGV[1]` = `1` to publish a
/// release notice for each deleted name key as `RELEASE_NOTIFY` does (with the released value,
/// so waiters tell this release from others). Returns 1 when a key was deleted, 0 when there was
/// none.
///
/// The name's key goes whatever its type: a lock value, the readers' marker, or a semaphore's
/// sorted set of holders (permit count and all). Where readers held the name (its key holds their
/// marker), their set goes too: otherwise a forced-out reader's entry would outlive the marker,
/// and a reader arriving later would set a marker under which the forced-out one could extend
/// again. The mark goes too: it would refuse new readers for the rest of its life (as long as
/// the expiry with a custom retry delay), although nobody holds the name; a writer still waiting
/// marks again at its next attempt. The fencing counter (`<name>:fence`) is another key and
/// stays.
pub(crate) const FORCE_RELEASE: &str = r#"
local deleted = 0
for i = 1, #KEYS, 3 do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  if kind ~= 'none' then
    local current = ''
    if kind == 'string' then current = redis.call('GET', KEYS[i]) end
    if current == 'redmutex:readers' then redis.call('DEL', KEYS[i + 1]) end
    redis.call('DEL', KEYS[i])
    if ARGV[1] == '1' then
      redis.call('PUBLISH', 'redmutex:released:' .. KEYS[i], current)
    end
    deleted = 1
  end
  if redis.call('DEL', KEYS[i + 2]) > 0 then deleted = 1 end
end
return deleted
"#;

/// The start of every semaphore script. `KEYS[1]` = the name: a sorted set of the holders'
/// values, each scored by when it expires (milliseconds on this node's clock), and one more
/// member, the empty string (never a lock value), scored by minus the permit count the holders
/// agreed on. One key holds both, so the count lives and goes exactly as long as the holders do.
/// Defines `refused(reply)`, which turns the error of the first command on the name into one that
/// says what the name holds instead (a `Mutex`'s lock is a string), and `clock()`.
///
/// Time is the node's own (`TIME`): an entry expires on the clock of the node that holds it, as a
/// key with a TTL does. Redis 7 replicates a script's effects, so `TIME` is allowed in one.
///
/// The key expires no earlier than its latest holder: its expiry is set with the first holder
/// and only ever moved outwards (`PEXPIREAT ... GT`, Redis 7.0). Were the name to expire first,
/// the node would forget live holders. The last holder to give its permit back deletes it, so a
/// semaphore nobody holds leaves nothing behind; one whose holders expired is gone by the latest
/// expiry. Scripts run on every acquire and release, so each sends as few commands as it can:
/// expired holders are swept only when they could matter (a full node, or another count).
macro_rules! semaphore_prelude {
    () => {
        r#"
local function refused(reply)
  if type(reply) ~= 'table' or not reply['err'] then return nil end
  local kind = redis.call('TYPE', KEYS[1])['ok']
  if kind == 'zset' then return reply end
  return redis.error_reply('REDMUTEX semaphore "' .. KEYS[1] .. '": the key holds a ' .. kind ..
    ', not the holders of a semaphore (does a Mutex use this name?)')
end
local function clock()
  local time = redis.call('TIME')
  return time[1] * 1000 + math.floor(time[2] / 1000)
end
"#
    };
}

/// Takes a permit: `ARGV[1]` = value, `ARGV[2]` = expiry in milliseconds, `ARGV[3]` = permits.
/// Admits the value only if fewer than `permits` live holders remain (expired ones are swept
/// first). Returns 0 when admitted (the value already there is admitted again, its expiry
/// renewed), -1 when the node is full, and an error naming both counts when live holders were
/// admitted under another permit count: two counts on one node would admit different numbers.
pub(crate) const SEMAPHORE_ACQUIRE: &str = concat!(
    semaphore_prelude!(),
    r#"
local members = redis.pcall('ZCARD', KEYS[1])
local refusal = refused(members)
if refusal then return refusal end
local now = clock()
local expires = now + ARGV[2]
local permits = tonumber(ARGV[3])
if members == 0 then
  redis.call('ZADD', KEYS[1], -permits, '', expires, ARGV[1])
  redis.call('PEXPIREAT', KEYS[1], expires)
  return 0
end
local agreed = redis.call('ZSCORE', KEYS[1], '')
local held = members
if agreed then
  agreed = -tonumber(agreed)
  held = members - 1
end
local other = agreed and agreed ~= permits
if other or held >= permits then
  held = held - redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
end
if other and held > 0 then
  return redis.error_reply('REDMUTEX semaphore "' .. KEYS[1] .. '" is held with ' .. agreed ..
    ' permits on this node, asked with ' .. permits ..
    ' (all holders must agree; the count can change once nobody holds it)')
end
if held >= permits and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return -1
end
if agreed == permits then
  redis.call('ZADD', KEYS[1], expires, ARGV[1])
else
  redis.call('ZADD', KEYS[1], -permits, '', expires, ARGV[1])
end
if held == 0 and not agreed then
  -- The sweep emptied a set without its count member (not one these scripts made): it is new.
  redis.call('PEXPIREAT', KEYS[1], expires)
else
  redis.call('PEXPIREAT', KEYS[1], expires, 'GT')
end
return 0
"#
);

/// Renews our permit's expiry, only while it is live: `ARGV[1]` = value, `ARGV[2]` = expiry in
/// milliseconds. Returns 1, or 0 when the value holds no live permit here (never re-creates one).
pub(crate) const SEMAPHORE_EXTEND: &str = concat!(
    semaphore_prelude!(),
    r#"
local expires = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
local refusal = refused(expires)
if refusal then return refusal end
if not expires then return 0 end
local now = clock()
if tonumber(expires) <= now then return 0 end
local renewed = now + ARGV[2]
redis.call('ZADD', KEYS[1], 'XX', renewed, ARGV[1])
redis.call('PEXPIREAT', KEYS[1], renewed, 'GT')
return 1
"#
);

/// Gives our permit back: `ARGV[1]` = value, `ARGV[2]` = `1` to publish a release notice (as
/// [`RELEASE_NOTIFY`] does, on the same channel). Returns 1, or 0 when the value held no live
/// permit here (an entry past its expiry is removed, but was no longer ours to give back). The
/// last holder deletes the name, permit count and all.
pub(crate) const SEMAPHORE_RELEASE: &str = concat!(
    semaphore_prelude!(),
    r#"
local expires = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
local refusal = refused(expires)
if refusal then return refusal end
if not expires then return 0 end
if redis.call('ZCOUNT', KEYS[1], 0, '+inf') == 1 then
  redis.call('DEL', KEYS[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
if tonumber(expires) <= clock() then return 0 end
if ARGV[2] == '1' then
  redis.call('PUBLISH', 'redmutex:released:' .. KEYS[1], ARGV[1])
end
return 1
"#
);

/// Every script, loaded into a node's cache on each new connection, so that requests sent by
/// digest find them even when nobody is left to send the fallback (see `node::Delivery`), and
/// known by digest when a node names one in an error.
pub(crate) const ALL: &[&str] = &[
    RELEASE,
    RELEASE_NOTIFY,
    EXTEND,
    ACQUIRE_FENCED,
    RAISE,
    INSPECT,
    FORCE_RELEASE,
    fair::ROUND,
    fair::RELEASE,
    SEMAPHORE_ACQUIRE,
    SEMAPHORE_EXTEND,
    SEMAPHORE_RELEASE,
    NAMES_ACQUIRE,
    NAMES_EXTEND,
    NAMES_RELEASE,
    NAMES_RAISE,
    READ_ACQUIRE,
    READ_EXTEND,
    READ_RELEASE,
    WRITE_ACQUIRE,
];

/// SHA1 digests for EVALSHA, computed once per process rather than per call.
pub(crate) struct Digests {
    pub release: String,
    pub release_notify: String,
    pub extend: String,
    pub acquire_fenced: String,
    pub raise: String,
    pub inspect: String,
    pub force_release: String,
    pub semaphore_acquire: String,
    pub semaphore_extend: String,
    pub semaphore_release: String,
    pub names_acquire: String,
    pub names_extend: String,
    pub names_release: String,
    pub names_raise: String,
    pub read_acquire: String,
    pub read_extend: String,
    pub read_release: String,
    pub write_acquire: String,
}

fn digest(script: &str) -> String {
    redis::Script::new(script).get_hash().to_owned()
}

pub(crate) static DIGESTS: LazyLock<Digests> = LazyLock::new(|| Digests {
    release: digest(RELEASE),
    release_notify: digest(RELEASE_NOTIFY),
    extend: digest(EXTEND),
    acquire_fenced: digest(ACQUIRE_FENCED),
    raise: digest(RAISE),
    inspect: digest(INSPECT),
    force_release: digest(FORCE_RELEASE),
    semaphore_acquire: digest(SEMAPHORE_ACQUIRE),
    semaphore_extend: digest(SEMAPHORE_EXTEND),
    semaphore_release: digest(SEMAPHORE_RELEASE),
    names_acquire: digest(NAMES_ACQUIRE),
    names_extend: digest(NAMES_EXTEND),
    names_release: digest(NAMES_RELEASE),
    names_raise: digest(NAMES_RAISE),
    read_acquire: digest(READ_ACQUIRE),
    read_extend: digest(READ_EXTEND),
    read_release: digest(READ_RELEASE),
    write_acquire: digest(WRITE_ACQUIRE),
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha1_hex_and_distinct() {
        let digests = [
            &DIGESTS.release,
            &DIGESTS.release_notify,
            &DIGESTS.extend,
            &DIGESTS.acquire_fenced,
            &DIGESTS.raise,
            &DIGESTS.inspect,
            &DIGESTS.force_release,
            &DIGESTS.semaphore_acquire,
            &DIGESTS.semaphore_extend,
            &DIGESTS.semaphore_release,
            &DIGESTS.names_acquire,
            &DIGESTS.names_extend,
            &DIGESTS.names_release,
            &DIGESTS.names_raise,
            &DIGESTS.read_acquire,
            &DIGESTS.read_extend,
            &DIGESTS.read_release,
            &DIGESTS.write_acquire,
            &fair::DIGESTS.round,
            &fair::DIGESTS.release,
        ];
        for digest in digests {
            assert_eq!(digest.len(), 40);
            assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));
        }
        let distinct: std::collections::HashSet<_> = digests.iter().collect();
        assert_eq!(distinct.len(), digests.len());
        let all: Vec<String> = ALL.iter().map(|script| digest(script)).collect();
        assert_eq!(all.len(), digests.len(), "ALL lists every script once");
        assert!(
            digests.iter().all(|d| all.contains(d)),
            "ALL lists every script"
        );
    }

    #[test]
    fn notices_go_to_the_channel_listeners_subscribe_to() {
        for script in [
            RELEASE_NOTIFY,
            FORCE_RELEASE,
            SEMAPHORE_RELEASE,
            NAMES_RELEASE,
            READ_RELEASE,
        ] {
            assert!(script.contains(&format!("'{NOTICE_PREFIX}' .. ")));
        }
    }

    #[test]
    fn the_readers_marker_is_the_one_the_scripts_use() {
        let quoted = format!("'{READERS_MARKER}'");
        for script in [
            READ_ACQUIRE,
            READ_EXTEND,
            READ_RELEASE,
            WRITE_ACQUIRE,
            INSPECT,
            FORCE_RELEASE,
        ] {
            assert!(script.contains(&quoted));
            // Every mention is the marker itself, quoted whole.
            assert_eq!(
                script.matches("redmutex:readers").count(),
                script.matches(&quoted).count()
            );
        }
    }

    /// The scripts as `.lua` files, assembled by the build script, are these texts byte for byte
    /// (so their digests, which nodes cache them by, are the same too).
    #[test]
    fn the_lua_files_assemble_to_the_scripts_byte_for_byte() {
        use crate::nodes::script::{Script, lua};
        let pairs: [(Script, &str); 22] = [
            (lua!("primitives/mutex/release.lua"), RELEASE),
            (lua!("primitives/mutex/release_notify.lua"), RELEASE_NOTIFY),
            (lua!("primitives/mutex/extend.lua"), EXTEND),
            (lua!("primitives/mutex/acquire_fenced.lua"), ACQUIRE_FENCED),
            (lua!("primitives/mutex/raise.lua"), RAISE),
            (lua!("ops/inspect/inspect.lua"), INSPECT),
            (lua!("ops/inspect/force_release.lua"), FORCE_RELEASE),
            (lua!("waiting/fair/round.lua"), fair::ROUND),
            (lua!("waiting/fair/release.lua"), fair::RELEASE),
            (lua!("primitives/semaphore/acquire.lua"), SEMAPHORE_ACQUIRE),
            (lua!("primitives/semaphore/extend.lua"), SEMAPHORE_EXTEND),
            (lua!("primitives/semaphore/release.lua"), SEMAPHORE_RELEASE),
            (lua!("primitives/multi/acquire.lua"), NAMES_ACQUIRE),
            (lua!("primitives/multi/extend.lua"), NAMES_EXTEND),
            (lua!("primitives/multi/release.lua"), NAMES_RELEASE),
            (lua!("primitives/multi/raise.lua"), NAMES_RAISE),
            (lua!("primitives/rwlock/read_acquire.lua"), READ_ACQUIRE),
            (lua!("primitives/rwlock/read_extend.lua"), READ_EXTEND),
            (lua!("primitives/rwlock/read_release.lua"), READ_RELEASE),
            (lua!("primitives/rwlock/write_acquire.lua"), WRITE_ACQUIRE),
            (lua!("primitives/semaphore/prelude.lua"), semaphore_prelude!()),
            (lua!("primitives/fenced_set.lua"), crate::fenced::FENCED_SET),
        ];
        for (script, old) in pairs {
            assert_eq!(script.text(), old, "{}", script.path());
            assert_eq!(script.digest(), digest(old), "{}", script.path());
        }
        // Every script the nodes load is compared above.
        for old in ALL {
            assert!(pairs.iter().any(|(_, text)| text == old));
        }
    }
}
