#!/usr/bin/env bash
# A GPU job that outlives the `run` call that starts it: the device machine kills a call's processes when the call
# returns, except those in a new process session (/work/.library/device/README.md), so the job runs under setsid and
# every call of the lease, this one included, waits for it. One server can then measure for longer than one call's
# 10 minutes (a window or the rounds of a cross-check need not restart the server, 250 s cold on the H200, per call).
#   usage: detached.sh NAME CALL_SECONDS CMD...
# The first call on a machine starts CMD (with OUT=/tmp/jobs/NAME/out); every call then waits until the job ends or
# CALL_SECONDS have passed, copies the job's out/ into this call's $OUT, runs $COLLECT if set (e.g. a tarball of
# the results so far, so a machine taken back mid-job loses only what came after) and shows the log's tail.
# Exit status: the job's own once it has ended, 75 while it still runs (call again within the idle release).
set -uo pipefail
name=${1:?usage: detached.sh NAME CALL_SECONDS CMD...}
call=${2:?usage: detached.sh NAME CALL_SECONDS CMD...}
shift 2
dir=/tmp/jobs/$name
if [ ! -e "$dir/started" ]; then
  mkdir -p "$dir/out"
  date +%s > "$dir/started"
  JOB_DIR=$dir OUT=$dir/out setsid nohup bash -c '"$@"; echo $? > "$JOB_DIR/rc"' job "$@" \
    > "$dir/log" 2>&1 < /dev/null &
  echo "started $name (pid $!)"
fi
while [ ! -e "$dir/rc" ] && [ "$SECONDS" -lt "$call" ]; do sleep 5; done
cp -r "$dir/out/." "$OUT/" 2>/dev/null
[ -n "${COLLECT:-}" ] && bash -c "$COLLECT"
echo "== $name: $(( $(date +%s) - $(cat "$dir/started") )) s since it started"
tail -n 40 "$dir/log"
if [ -e "$dir/rc" ]; then exit "$(cat "$dir/rc")"; fi
exit 75
