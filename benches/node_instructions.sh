#!/usr/bin/env bash
# What one lock+unlock costs a Redis node, in instructions counted by callgrind, per primitive.
#
# Wall time on a shared 2-core machine moves 10-20 % between runs; instruction counts do not. A
# redis-server runs under callgrind twice per case, receiving N and then 2N acquire+release
# pairs over one connection (redis-cli fed from a file); the difference divided by N is the cost
# of one pair on the node: command parsing, script execution and replies, user space only
# (the kernel's share of the socket I/O is not counted). The scripts are read from their .lua
# files under src/, assembled as build.rs assembles them, so this measures the code as it is.
#
# Usage: bash benches/node_instructions.sh [pairs]   (default 2000; about a minute)
#        NODE_CASES='mutex fair-entry' bash benches/node_instructions.sh   (some cases only;
#        fair-handoff, a join round and a release that hands over, wake-marked, a release that
#        finds a waiter's mark and notifies, wake-sharded, the same as a cluster member's
#        script sends it (SPUBLISH), wake-kept, a release that keeps the mark (its holder
#        waited) and notifies, and default-inline, the default's release sent in
#        full (EVAL) as cleanups send it, run only when named; so do
#        the primitives' cases of issue 29: write-plain, names-plain-N (the multi-name lock's
#        plain entry over N free names), semaphore, semaphore-among-2 and the
#        floors floor-semaphore, floor-read, floor-names-8, the commands that decide a case sent
#        plain, without a script around them; fenced, a fenced mutex's acquire, raise and
#        release; write-plain-tx and fair-entry-tx, those entries as a cluster member sends them,
#        in MULTI/EXEC; and the other primitives' default requests since issue 42, whose
#        releases look for the waiters' mark: read-default, write-default,
#        names-plain-default-N, semaphore-default)
# Needs valgrind and redis-server (Debian's packages valgrind, redis-server).
set -euo pipefail
# Byte lengths in the protocol: ${#arg} counts bytes only in the C locale.
export LC_ALL=C
cd "$(dirname "$0")/.."
pairs=${1:-2000}
for tool in valgrind redis-server redis-cli callgrind_annotate; do
    command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A script as the nodes receive it: the file without its header (the comment lines before its
# first other line), each `--- @include "piece.lua"` line replaced by that file, assembled the same
# way (as build.rs does).
lua() {
    awk '
        function emit(file,    line, header, piece, dir) {
            header = 1
            dir = file
            sub(/[^\/]*$/, "", dir)
            while ((getline line < file) > 0) {
                piece = ""
                if (line ~ /^--- @include "[^"]*"$/) {
                    piece = substr(line, 15, length(line) - 15)
                }
                if (header && line ~ /^--/ && piece == "") continue
                header = 0
                if (piece != "") emit(dir piece)
                else print line
            }
            close(file)
        }
        BEGIN { emit(ARGV[1]); exit }
    ' "$1"
}

# Redis protocol for one command (arguments as given), so that scripts travel verbatim.
resp() {
    printf '*%d\r\n' "$#"
    for arg in "$@"; do
        printf '$%d\r\n%s\r\n' "${#arg}" "$arg"
    done
}

sha() { printf '%s' "$1" | sha1sum | cut -d' ' -f1; }
release=$(lua src/primitives/mutex/release.lua)
release_notify=$(lua src/primitives/mutex/release_notify.lua)
release_keep=$(lua src/primitives/mutex/release_keep.lua)
fair_round=$(lua src/waiting/fair/round.lua)
fair_release=$(lua src/waiting/fair/release.lua)
release_notify_sha=$(sha "$release_notify")
release_keep_sha=$(sha "$release_keep")
fair_round_sha=$(sha "$fair_round")
fair_release_sha=$(sha "$fair_release")
names_acquire=$(lua src/primitives/multi/acquire.lua)
names_release=$(lua src/primitives/multi/release.lua)
read_acquire=$(lua src/primitives/rwlock/read_acquire.lua)
read_release=$(lua src/primitives/rwlock/read_release.lua)
write_acquire=$(lua src/primitives/rwlock/write_acquire.lua)
fenced_acquire=$(lua src/primitives/mutex/acquire_fenced.lua)
fenced_raise=$(lua src/primitives/mutex/raise.lua)
fenced_acquire_sha=$(sha "$fenced_acquire")
fenced_raise_sha=$(sha "$fenced_raise")
release_sha=$(sha "$release")
names_acquire_sha=$(sha "$names_acquire")
names_release_sha=$(sha "$names_release")
read_acquire_sha=$(sha "$read_acquire")
read_release_sha=$(sha "$read_release")
write_acquire_sha=$(sha "$write_acquire")
sem_acquire=$(lua src/primitives/semaphore/acquire.lua)
sem_release=$(lua src/primitives/semaphore/release.lua)
sem_acquire_sha=$(sha "$sem_acquire")
sem_release_sha=$(sha "$sem_release")
noop='return 0'
noop_sha=$(sha "$noop")

# The keys beside the name `n` are in its slot: `{n}:line`, ... (see `engine::target::beside`).
line=('{n}:line' '{n}:line:until' '{n}:ticket')
# A client's channel for the fair line's grants (see `nodes::listener::grant_channel`).
grants='redmutex:granted:{n}:0000000000c0ffee'

# The commands of `count` pairs of case `case`, in RESP.
commands() {
    local case=$1 count=$2 i v
    for script in "$release" "$names_acquire" "$names_release" "$read_acquire" "$read_release" \
        "$write_acquire" "$noop" "$release_notify" "$release_keep" "$fair_round" "$fair_release" \
        "$sem_acquire" "$sem_release" "$fenced_acquire" "$fenced_raise"; do
        resp SCRIPT LOAD "$script"
    done
    if [ "$case" = read-among-7 ] || [ "$case" = floor-read ]; then
        for i in 1 2 3 4 5 6 7; do
            resp ZADD '{n}:readers' 9999999999999 "other$i"
        done
        resp SET n redmutex:readers PXAT 9999999999999
        resp PEXPIREAT '{n}:readers' 9999999999999
    fi
    if [ "$case" = semaphore-among-2 ] || [ "$case" = floor-semaphore ]; then
        resp ZADD s -3 '' 9999999999999 other1 9999999999999 other2
        resp PEXPIREAT s 9999999999999
    fi
    if [ "$case" = fair-handoff ]; then
        resp SET n value0 PX 8000
    fi
    for ((i = 0; i < count; i++)); do
        v="value$i"
        case $case in
        mutex)
            # The plain release (with_wake_on_release(false); the default before issue 42).
            resp SET n "$v" NX PX 8000
            resp EVALSHA "$release_sha" 1 n "$v"
            ;;
        fenced)
            # A fenced mutex on a standalone server: the acquire that reads the counter (and the
            # previous layout's), the raise to the token, the release. Tokens of today's size
            # (microseconds since 1970), one more each time.
            resp EVALSHA "$fenced_acquire_sha" 3 n '{n}:fence' 'n:fence' "$v" 8000
            resp EVALSHA "$fenced_raise_sha" 2 n '{n}:fence' "$v" $((1750000000000000 + i))
            resp EVALSHA "$release_sha" 1 n "$v"
            ;;
        default)
            # The default while nobody waits: the release with notice finds no waiter's mark
            # (`n:waiters`, made in the script from the name), deletes key and mark in one DEL,
            # and publishes nothing.
            resp SET n "$v" NX PX 8000
            resp EVALSHA "$release_notify_sha" 1 n "$v"
            ;;
        default-inline)
            # The default's release sent in full (EVAL), as the cleanup after a failed or
            # cancelled attempt and a dropped lock's release send it (`Delivery::Inline`).
            resp SET n "$v" NX PX 8000
            resp EVAL "$release_notify" 1 n "$v"
            ;;
        wake-marked)
            # Somebody waits: its mark (PSETEX, as a waiter's attempt sends it), then the
            # release, which finds it and publishes (PUBLISH on the name's channel, the script's
            # defaults, as a standalone server gets it).
            resp PSETEX n:waiters 1000 1
            resp SET n "$v" NX PX 8000
            resp EVALSHA "$release_notify_sha" 1 n "$v"
            ;;
        wake-kept)
            # Somebody waits under steady contention, and the holder had waited too: the mark is
            # there (set once, before the pairs), the release keeps it (release_keep.lua, given how
            # long the mark lives from then) and publishes, so no waiter needs to mark again.
            if [ "$i" = 0 ]; then resp PSETEX n:waiters 99999999 1; fi
            resp SET n "$v" NX PX 8000
            resp EVALSHA "$release_keep_sha" 1 n "$v" 10000
            ;;
        wake-sharded)
            # The same, as a cluster member's script publishes: the mark beside the name as a
            # key, the command and the channel as arguments, SPUBLISH on the name's slot channel
            # (a standalone server takes sharded pub/sub too, from 7.0).
            resp PSETEX '{n}:waiters' 1000 1
            resp SET n "$v" NX PX 8000
            resp EVALSHA "$release_notify_sha" 2 n '{n}:waiters' "$v" SPUBLISH 'redmutex:released:{n}'
            ;;
        fair-entry)
            # A fair mutex while nobody waits: the plain entry, then the fair release, which
            # finds no waiters' mark (a standalone server's request: the name and the value).
            resp SET n "$v" NX PX 8000
            resp EXISTS '{n}:line'
            resp EVALSHA "$fair_release_sha" 1 n "$v"
            ;;
        fair-round)
            # A fair round on a free name (its fast path), then the fair release.
            resp EVALSHA "$fair_round_sha" 6 n "${line[@]}" n:waiters '{n}:line:to' "$v" 8000 1 "$grants"
            resp EVALSHA "$fair_release_sha" 1 n "$v"
            ;;
        fair-handoff)
            # Contended: the next waiter joins the line (a full round, which marks the name),
            # then the holder's release finds the mark and hands the key to it, which holds in
            # the next pair; the grant goes to the waiter's client's channel.
            resp EVALSHA "$fair_round_sha" 6 n "${line[@]}" n:waiters '{n}:line:to' "value$((i + 1))" 8000 $((i + 1)) "$grants"
            resp EVALSHA "$fair_release_sha" 1 n "$v"
            ;;
        empty-scripts)
            # The fixed cost of running a script: two that do nothing, with a mutex's arguments.
            resp EVALSHA "$noop_sha" 1 n "$v" 8000
            resp EVALSHA "$noop_sha" 1 n "$v"
            ;;
        names-[0-9]*)
            local n=${case#names-} keys=() k
            for ((k = 0; k < n; k++)); do keys+=("n:$k"); done
            resp EVALSHA "$names_acquire_sha" "$n" "${keys[@]}" "$v" 8000 1
            resp EVALSHA "$names_release_sha" "$n" "${keys[@]}" "$v"
            ;;
        names-plain-*)
            # The multi-name lock's plain entry over free names (see `multi::MultiTarget::entry`):
            # every SET NX PX in one MULTI/EXEC (one name: the SET alone), then the release script.
            local n=${case#names-plain-} keys=() k
            for ((k = 0; k < n; k++)); do keys+=("n:$k"); done
            [ "$n" -gt 1 ] && resp MULTI
            for k in "${keys[@]}"; do resp SET "$k" "$v" NX PX 8000; done
            [ "$n" -gt 1 ] && resp EXEC
            resp EVALSHA "$names_release_sha" "$n" "${keys[@]}" "$v"
            ;;
        read | read-among-7)
            resp EVALSHA "$read_acquire_sha" 3 n '{n}:readers' '{n}:writer-waiting' "$v" 8000
            resp EVALSHA "$read_release_sha" 2 n '{n}:readers' "$v"
            ;;
        read-default)
            # The default reader while nobody waits: the last reader's release also looks for
            # a waiter's mark (one more DEL), and finds none.
            resp EVALSHA "$read_acquire_sha" 3 n '{n}:readers' '{n}:writer-waiting' "$v" 8000
            resp EVALSHA "$read_release_sha" 3 n '{n}:readers' n:waiters "$v" PUBLISH
            ;;
        write)
            resp EVALSHA "$write_acquire_sha" 3 n '{n}:readers' '{n}:writer-waiting' "$v" 8000 1450
            resp EVALSHA "$release_sha" 1 n "$v"
            ;;
        write-default)
            # The default writer while nobody waits: the mutex's release with notice.
            resp EVALSHA "$write_acquire_sha" 3 n '{n}:readers' '{n}:writer-waiting' "$v" 8000 1450
            resp EVALSHA "$release_notify_sha" 1 n "$v"
            ;;
        names-plain-default-*)
            # The multi-name lock's plain entry and its default release while nobody waits: the
            # names' marks in the release's DEL, none there.
            local n=${case#names-plain-default-} keys=() marks=() k
            for ((k = 0; k < n; k++)); do keys+=("n:$k"); marks+=("n:$k:waiters"); done
            [ "$n" -gt 1 ] && resp MULTI
            for k in "${keys[@]}"; do resp SET "$k" "$v" NX PX 8000; done
            [ "$n" -gt 1 ] && resp EXEC
            resp EVALSHA "$names_release_sha" $((2 * n)) "${keys[@]}" "${marks[@]}" "$v" PUBLISH
            ;;
        write-plain)
            # The writer's plain entry where no reader holds (SET NX with the old value, and
            # whether a writer's mark stands, in one write), then the mutex's release.
            resp SET n "$v" NX PX 8000 GET
            resp EXISTS '{n}:writer-waiting'
            resp EVALSHA "$release_sha" 1 n "$v"
            ;;
        write-plain-tx)
            # The same entry as a cluster member sends it: one MULTI/EXEC (a slot migration
            # redirects a transaction as a whole; see `engine::target::entry_for`).
            resp MULTI
            resp SET n "$v" NX PX 8000 GET
            resp EXISTS '{n}:writer-waiting'
            resp EXEC
            resp EVALSHA "$release_sha" 1 n "$v"
            ;;
        fair-entry-tx)
            # The fair entry as a cluster member sends it (without its release notice's SPUBLISH
            # arguments, as fair-entry), then the fair release.
            resp MULTI
            resp SET n "$v" NX PX 8000
            resp EXISTS '{n}:line'
            resp EXEC
            resp EVALSHA "$fair_release_sha" 1 n "$v"
            ;;
        semaphore | semaphore-among-2)
            # A permit of 3 taken and given back, alone or beside 2 other holders.
            resp EVALSHA "$sem_acquire_sha" 1 s "$v" 8000 3
            resp EVALSHA "$sem_release_sha" 1 s "$v"
            ;;
        semaphore-default)
            # The default while nobody waits: giving back also looks for a waiter's mark (one
            # more DEL in the script), and finds none.
            resp EVALSHA "$sem_acquire_sha" 1 s "$v" 8000 3
            resp EVALSHA "$sem_release_sha" 2 s s:waiters "$v" PUBLISH
            ;;
        floor-semaphore)
            # Floors: the commands that decide each case, sent plain, without a script around
            # them (no atomicity, so no implementation could send them so; what the node's work
            # would be if a script cost nothing). A permit beside 2 holders: count, add, raise
            # the expiry; give back: remove, count.
            resp ZCARD s
            resp ZADD s 9999999999998 "$v"
            resp PEXPIREAT s 9999999999999 GT
            resp ZREM s "$v"
            resp ZCARD s
            ;;
        floor-read)
            # A reader among 7: name and mark, entry, expiries; leaving: remove, latest entry.
            resp MGET n '{n}:writer-waiting'
            resp ZADD '{n}:readers' 9999999999998 "$v"
            resp PEXPIREAT n 9999999999999 GT
            resp PEXPIREAT '{n}:readers' 9999999999999 GT
            resp ZREM '{n}:readers' "$v"
            resp ZRANGE '{n}:readers' -1 -1 WITHSCORES
            ;;
        floor-names-8)
            # 8 free names: one EXISTS, 8 SET PX; release: one MGET, one DEL.
            local keys=() k
            for ((k = 0; k < 8; k++)); do keys+=("n:$k"); done
            resp EXISTS "${keys[@]}"
            for k in "${keys[@]}"; do resp SET "$k" "$v" PX 8000; done
            resp MGET "${keys[@]}"
            resp DEL "${keys[@]}"
            ;;
        esac
    done
}

# Instructions the node executed for `count` pairs of `case`, start-up and shutdown included.
instructions() {
    local case=$1 count=$2 out socket="$work/redis.sock"
    out="$work/callgrind.$case.$count"
    commands "$case" "$count" >"$work/commands"
    # A unix socket: no port to collide with other servers on the machine.
    valgrind --tool=callgrind --callgrind-out-file="$out" \
        redis-server --port 0 --unixsocket "$socket" --save "" --appendonly no \
        --dir "$work" >"$work/valgrind.log" 2>&1 &
    local server=$! up=
    for _ in $(seq 600); do
        if redis-cli -s "$socket" PING >/dev/null 2>&1; then up=1; break; fi
        sleep 0.1
    done
    [ -n "$up" ] || { echo "redis-server under valgrind did not start" >&2; exit 1; }
    redis-cli -s "$socket" --pipe <"$work/commands" >"$work/pipe.log"
    grep -q "errors: 0" "$work/pipe.log" || { cat "$work/pipe.log" >&2; exit 1; }
    redis-cli -s "$socket" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    wait "$server" || true
    # Read to the end: an early exit would fail the pipeline (pipefail) with SIGPIPE.
    callgrind_annotate "$out" | awk '/PROGRAM TOTALS/ && !seen { gsub(",", "", $1); print $1; seen = 1 }'
}

printf '%-14s %14s %10s\n' "case" "instr/pair" "x mutex"
base=
for case in ${NODE_CASES:-mutex empty-scripts default fair-entry fair-round names-1 names-2 names-8 names-32 read read-among-7 write}; do
    once=$(instructions "$case" "$pairs")
    twice=$(instructions "$case" $((2 * pairs)))
    per=$(((twice - once) / pairs))
    base=${base:-$per}
    printf '%-14s %14d %10s\n' "$case" "$per" "$(awk -v a="$per" -v b="$base" 'BEGIN { printf "%.2f", a / b }')"
done
