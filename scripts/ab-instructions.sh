#!/usr/bin/env bash
# Instructions per POST of two builds of the service, counted by valgrind's callgrind: A is another
# checkout (say base's, built), B this one. Unlike time, an instruction count does not move with
# the machine's pace or with other work on it: what it shows is the work each build asks of the
# CPU for the same requests (in user space; the kernel's share, system calls and the disk, is not
# counted). Each server runs under callgrind (about 50 times slower), both at once on CPUs of
# their own, each on a fresh SQLite file, at `warn` with no rate limit (with BENCH_AS_USER=1:
# `info` and the rate limit on, above the load), with `npm start`'s heap flag; it takes WARM POSTs, its counts are zeroed, then it takes COUNT POSTs (64 connections,
# scripts/fixed-posts.ts) and its counts are read. Reported per POST: every thread; the event
# loop's thread; SQLite (better-sqlite3's addon, which holds it); V8's optimizing compiler on its
# threads. Under callgrind V8 is still compiling after tens of thousands of requests: compare the
# event loop's and SQLite's figures, and read the compiler's as how far from steady the run was.
# Work done by the clock (the token cache's one-second lifetime, timers) weighs about 50 times
# more per request under callgrind than natively.
# A_NODE and B_NODE add Node flags to one side. With `fastify` for OTHER_CHECKOUT, A is the
# Fastify durable yardstick (scripts/yardstick-fastify.ts on this checkout's build): the service's
# own share, counted. About 5–10 minutes with the defaults.
# Usage: scripts/ab-instructions.sh OTHER_CHECKOUT|fastify [WARM (30000)] [COUNT (10000)]
set -euo pipefail
B=$(cd "$(dirname "$0")/.." && pwd)
if [ "$1" = fastify ]; then A=$B; A_SERVER=fastify; else A=$(cd "$1" && pwd); A_SERVER=service; fi
if [ "${BENCH_AS_USER:-}" = 1 ]; then LOG_LEVEL=info RATE_LIMIT=100000000; else LOG_LEVEL=warn RATE_LIMIT=0; fi
WARM=${2:-30000}
COUNT=${3:-10000}
WORK=$(mktemp -d)
PIDS=()
# With AB_KEEP=DIR the two dumps are kept there (A.out.1, B.out.1), for callgrind_annotate's counts by symbol.
trap 'kill "${PIDS[@]}" 2>/dev/null; if [ -n "${AB_KEEP:-}" ]; then mkdir -p "$AB_KEEP" && cp "$WORK"/*.out.* "$AB_KEEP"/ || echo "ab-instructions: no dumps to keep" >&2; fi; rm -rf "$WORK"' EXIT
# callgrind_control finds a process by a pipe named after the user and host that valgrind saw
# (LOGNAME, HOST): the service's HOST is its address, so the control calls are given the same.
export LOGNAME=${LOGNAME:-$(id -un)} HOST=127.0.0.1

# Starts checkout $1 under callgrind on port $2 and CPU $3 as $4 (A or B): $WORK/$4.pid, $WORK/$4.token.
start () {
  local dir=$1 port=$2 cpu=$3 name=$4 db="$WORK/$4.db" flags server=dist/cli/main.js
  if [ "$name" = A ]; then flags=${A_NODE:-}; else flags=${B_NODE:-}; fi
  if [ "$name" = A ] && [ "$A_SERVER" = fastify ]; then
    echo yardstick-token > "$WORK/$name.token"
    # Plain JavaScript, as the bench runs it: under tsx its loader would be counted in the yardstick's POSTs.
    (cd "$dir" && node --import tsx -e "import('./scripts/compile-yardsticks.ts').then(m => m.compileYardsticks(process.cwd(), process.argv[1]))" "$WORK/yardsticks")
    server=$WORK/yardsticks/yardstick-fastify.js
  else
    (cd "$dir" && DATABASE_URL=$db node dist/cli/main.js tokens create --name ab 2>/dev/null) > "$WORK/$name.token"
  fi
  # shellcheck disable=SC2086 # flags: words, each a Node flag
  (cd "$dir" && DATABASE_URL=$db DATABASE_PATH=$db PLANTSTORE_ROOT=$dir YARDSTICK_TOKEN=$(cat "$WORK/$name.token") PORT=$port \
    LOG_LEVEL=$LOG_LEVEL RATE_LIMIT_PER_MINUTE=$RATE_LIMIT exec taskset -c "$cpu" \
    valgrind --tool=callgrind --callgrind-out-file="$WORK/$name.out" node --max-semi-space-size=8 $flags $server \
    >"$WORK/$name.log" 2>&1) &
  echo $! > "$WORK/$name.pid"
}

# Sends $1's warm-up, zeroes its counts, sends the counted POSTs and has the counts written out.
load () {
  local name=$1 port=$2 pid token
  pid=$(cat "$WORK/$name.pid")
  token=$(cat "$WORK/$name.token")
  until curl -s -o /dev/null "http://127.0.0.1:$port/healthz"; do sleep 1; done
  (cd "$B" && node --import tsx scripts/fixed-posts.ts "$port" "$token" 1000 "$WARM") > /dev/null
  callgrind_control -z "$pid" > /dev/null 2>&1
  (cd "$B" && node --import tsx scripts/fixed-posts.ts "$port" "$token" 10000000 "$COUNT") > "$WORK/$name.statuses"
  callgrind_control -d "$pid" > /dev/null 2>&1
}

# One build's line: its dump's counts per POST.
report () {
  local dump
  dump=$(ls "$WORK/$1.out".* | head -1)
  callgrind_annotate --inclusive=yes --auto=no --threshold=100 "$dump" 2>/dev/null | awk -v n="$COUNT" -v name="$1" -v statuses="$(cat "$WORK/$1.statuses")" '
    function count(line) { gsub(/,/, "", line); split(line, f, " "); return f[1] }
    /PROGRAM TOTALS/ { all = count($0) }
    /\(below main\) \[.*\/node\]/ { loop = count($0) }
    /CompileTask::RunInternal/ { compiler = count($0) }
    END { printf "%s: %.0f all threads, %.0f the event loop, %.0f V8 compiling; answers %s\n", name, all / n, loop / n, compiler / n, statuses }'
  callgrind_annotate --auto=no --threshold=100 "$dump" 2>/dev/null | awk -v n="$COUNT" '
    /better_sqlite3\.node\]/ { v = $1; gsub(/,/, "", v); s += v } END { printf "   SQLite (better-sqlite3): %.0f\n", s / n }'
}

start "$A" 18811 0 A
start "$B" 18812 1 B
PIDS=("$(cat "$WORK/A.pid")" "$(cat "$WORK/B.pid")")
load A 18811 &
loading=$!
load B 18812
wait "$loading"
echo "instructions per POST ($WARM POSTs to warm up, $COUNT counted); A: $A_SERVER at $A, B: service at $B"
report A
report B
