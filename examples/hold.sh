#!/usr/bin/env bash
# Hold a lock with nothing but curl: POST /hold keeps the lease while the
# connection stays open (the server renews it every ttl/3) and releases it
# the moment the connection closes. Runs COMMAND under the lock and exits
# with its status; if the stream says `lost`, stops COMMAND and exits 3.
#
#   ./hold.sh KEY COMMAND [ARGS...]        (COMMAND gets LOCKD_FENCE)
set -uo pipefail

server=${LOCKD_SERVER:-http://127.0.0.1:8080}
key=$1; shift
ttl_ms=${TTL_MS:-30000}
wait_ms=${WAIT_MS:-10000}

events=$(mktemp)
# The API key reaches curl as a config line on its stdin (-K -), never in
# its argv: ps shows every process's argv for as long as the hold lasts.
auth_config=
if [[ -n ${LOCKD_API_KEY:-} ]]; then
  k=${LOCKD_API_KEY//\\/\\\\}   # curl config quoting: \ and \"
  auth_config="header = \"Authorization: Bearer ${k//\"/\\\"}\""
fi
curl -sS -N --fail-with-body -K - -X POST -H 'Content-Type: application/json' \
  -d "{\"ttl_ms\": $ttl_ms, \"wait_ms\": $wait_ms}" \
  "$server/v1/locks/$key/hold" >"$events" <<<"$auth_config" &
curl_pid=$!
# However this script ends, closing the stream gives the lock back.
trap 'kill $curl_pid 2>/dev/null; rm -f "$events"' EXIT

# The first event is `acquired`; if curl ends first, the key was held (409)
# or the server refused: the body says why.
until grep -q '^event: acquired' "$events"; do
  if ! kill -0 $curl_pid 2>/dev/null; then
    echo "could not take $key: $(cat "$events")" >&2
    grep -q '"lock_held"' "$events" && exit 1
    exit 4
  fi
  sleep 0.05
done
fence=$(grep -m1 -A1 '^event: acquired' "$events" | sed -n 's/.*"fence":\([0-9]*\).*/\1/p')
echo "holding $key (fence $fence)"

LOCKD_FENCE=$fence "$@" &
work=$!
while kill -0 $work 2>/dev/null; do
  if grep -q '^event: lost' "$events" || ! kill -0 $curl_pid 2>/dev/null; then
    echo "lost $key: $(grep -m1 -A1 '^event: lost' "$events" | tail -n1)" >&2
    kill $work 2>/dev/null
    wait $work
    exit 3
  fi
  sleep 0.05
done
status=0
wait $work || status=$?
echo "released $key"
exit $status
