#!/usr/bin/env bash
# CPU time per request of two builds of the service under the same wrk load: A is another
# checkout (say main's, built), B this one. Both run at once, each on a fresh SQLite file, and
# take turns in short bursts (the order alternating), so both meet the same machine minute by
# minute. The server's own CPU time (utime + stime from /proc) per answered request moves less
# than req/s when other work shares the machine. The service runs as `npm start` does, with
# LOG_LEVEL=warn and no rate limit (with BENCH_AS_USER=1: LOG_LEVEL=info and the rate limit on, above
# the load); servers pinned to CPU 0, wrk to CPU 1 (taskset), as in the bench.
# A_ENV and B_ENV add settings to one side ("LOG_LEVEL=info"): with OTHER_CHECKOUT this one, the
# cost of a setting. Usage: scripts/ab-cpu.sh OTHER_CHECKOUT [post|get|list] [PAIRS (20)] [SECONDS a burst (3)]
# (list: pages of 100 of 150 plants.) Each burst also prints wrk's p99 in ms.
set -euo pipefail
A=$(cd "$1" && pwd)
B=$(cd "$(dirname "$0")/.." && pwd)
SCENARIO=${2:-post}
PAIRS=${3:-20}
BURST=${4:-3}
TICK=$(getconf CLK_TCK)
if [ "${BENCH_AS_USER:-}" = 1 ]; then LOG_LEVEL=info RATE_LIMIT=100000000; else LOG_LEVEL=warn RATE_LIMIT=0; fi
WORK=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; rm -rf "$WORK"' EXIT

cpu_ticks () { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# Starts checkout $1 on port $2; writes its pid to $WORK/$3.pid and a wrk script to $WORK/$3.lua.
start () {
  local dir=$1 port=$2 name=$3 db="$WORK/$3.db" token settings
  if [ "$name" = A ]; then settings=${A_ENV:-}; else settings=${B_ENV:-}; fi
  token=$(cd "$dir" && DATABASE_URL=$db node dist/cli/main.js tokens create --name ab 2>/dev/null)
  # shellcheck disable=SC2086 # settings: words, each NAME=value
  (cd "$dir" && DATABASE_URL=$db PORT=$port HOST=127.0.0.1 LOG_LEVEL=$LOG_LEVEL RATE_LIMIT_PER_MINUTE=$RATE_LIMIT \
    exec env $settings taskset -c 0 node --max-semi-space-size=8 dist/cli/main.js serve >/dev/null 2>&1) &
  echo $! > "$WORK/$name.pid"
  until curl -s -o /dev/null "http://127.0.0.1:$port/healthz"; do sleep 0.1; done
  curl -s -o /dev/null -X POST "http://127.0.0.1:$port/plants" -H "Authorization: Bearer $token" \
    -H 'Content-Type: application/json' -d '{"id": 1, "name": "Fern"}'
  if [ "$SCENARIO" = post ]; then
    # Ids from a counter kept in a file, so no burst repeats an earlier one.
    cat > "$WORK/$name.lua" <<LUA
wrk.headers["Authorization"] = "Bearer $token"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("$WORK/$name.next", "r")
counter = f and tonumber(f:read("*a")) or 1000
if f then f:close() end
function request()
  counter = counter + 1
  return wrk.format("POST", "/plants", nil, '{"id":' .. counter .. ',"name":"Plant ' .. counter .. '","tag":"bench"}')
end
function done()
  local out = io.open("$WORK/$name.next", "w")
  out:write(tostring(counter + 1000000))
  out:close()
end
LUA
  elif [ "$SCENARIO" = list ]; then
    for id in $(seq 2 150); do
      curl -s -o /dev/null -X POST "http://127.0.0.1:$port/plants" -H "Authorization: Bearer $token" \
        -H 'Content-Type: application/json' -d "{\"id\": $id, \"name\": \"Plant $id\", \"tag\": \"bench\"}"
    done
    printf 'wrk.headers["Authorization"] = "Bearer %s"\nwrk.path = "/plants?limit=100"\n' "$token" > "$WORK/$name.lua"
  else
    printf 'wrk.headers["Authorization"] = "Bearer %s"\nwrk.path = "/plants/1"\n' "$token" > "$WORK/$name.lua"
  fi
}

# One burst against $1 (A or B) on port $2: prints "requests cpu-ticks non-2xx".
burst () {
  local pid before after out
  pid=$(cat "$WORK/$1.pid")
  before=$(cpu_ticks "$pid")
  out=$(taskset -c 1 wrk -t1 -c64 -d"${BURST}s" --latency -s "$WORK/$1.lua" "http://127.0.0.1:$2")
  after=$(cpu_ticks "$pid")
  echo "$(grep -oE '^ *[0-9]+ requests in' <<<"$out" | grep -oE '[0-9]+') $((after - before)) $(grep -oE 'Non-2xx or 3xx responses: [0-9]+' <<<"$out" | grep -oE '[0-9]+$' || echo 0) $(p99_ms <<<"$out")"
}

# wrk's 99th percentile latency (--latency), in ms.
p99_ms () {
  awk '$1 == "99%" { v = $2; if (v ~ /us$/) { sub(/us$/, "", v); v /= 1000 } else if (v ~ /ms$/) { sub(/ms$/, "", v) } else if (v ~ /s$/) { sub(/s$/, "", v); v *= 1000 } printf "%.2f", v }'
}

start "$A" 18801 A
start "$B" 18802 B
PIDS=("$(cat "$WORK/A.pid")" "$(cat "$WORK/B.pid")")
burst A 18801 > /dev/null
burst B 18802 > /dev/null # warm-up

echo "pair order | A req/s, µs CPU/req, p99 ms | B req/s, µs CPU/req, p99 ms | B/A µs CPU/req"
totals=(0 0 0 0)
ratios=()
for pair in $(seq "$PAIRS"); do
  if [ $((pair % 2)) = 1 ]; then a=$(burst A 18801); b=$(burst B 18802); order=AB
  else b=$(burst B 18802); a=$(burst A 18801); order=BA; fi
  read -r ar at abad ap99 <<<"$a"
  read -r br bt bbad bp99 <<<"$b"
  [ "$abad" = 0 ] && [ "$bbad" = 0 ] || echo "non-2xx answers: A $abad, B $bbad"
  totals=($((totals[0] + ar)) $((totals[1] + at)) $((totals[2] + br)) $((totals[3] + bt)))
  ratio=$(awk -v ar="$ar" -v at="$at" -v br="$br" -v bt="$bt" 'BEGIN { printf "%.3f", (bt / br) / (at / ar) }')
  ratios+=("$ratio")
  awk -v p="$pair" -v o="$order" -v ar="$ar" -v at="$at" -v br="$br" -v bt="$bt" -v d="$BURST" -v hz="$TICK" -v r="$ratio" -v ap="$ap99" -v bp="$bp99" \
    'BEGIN { printf "%d %s | %.0f, %.1f, %s | %.0f, %.1f, %s | %s\n", p, o, ar / d, at / hz * 1e6 / ar, ap, br / d, bt / hz * 1e6 / br, bp, r }'
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
awk -v a="${totals[0]}" -v at="${totals[1]}" -v b="${totals[2]}" -v bt="${totals[3]}" -v hz="$TICK" -v m="$median" \
  'BEGIN { printf "all bursts: A %.1f, B %.1f µs CPU/req: B/A %.3f; median of the pairs %s; requests A %d, B %d (B/A %.3f)\n", at / hz * 1e6 / a, bt / hz * 1e6 / b, (bt / b) / (at / a), m, a, b, b / a }'
