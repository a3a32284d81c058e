#!/usr/bin/env bash
# At most one nightly report at a time, across every machine that runs this
# script: `lockd run` holds the lock while the job runs, renews it every
# ttl/3, releases it when the job exits and exits with the job's status.
# The job finds the lease's fence in $LOCKD_FENCE: pass it along with its
# writes so that storage can reject a stale holder.
#
#   LOCKD_SERVER=http://lockd:8080 LOCKD_API_KEY=... ./run.sh
set -uo pipefail

key=${KEY:-report:nightly}
ttl=${TTL:-30s}
wait=${WAIT:-10s}
job_seconds=${JOB_SECONDS:-1}

lockd run --ttl "$ttl" --wait "$wait" --owner "report@$(hostname)" "$key" -- \
  sh -c 'echo "building the report under fence $LOCKD_FENCE"; sleep "$1"; echo "report written"' job "$job_seconds"
status=$?

case $status in
  0) echo "done" ;;
  1) echo "another run holds $key; skipping this one"; exit 0 ;;
  3) echo "lost $key while the job ran; the job was stopped" >&2 ;;
  4) echo "lockd is unreachable; try again later" >&2 ;;
esac
exit $status
