#!/bin/bash
# An idle router's CPU: `kvroute up` (the default fleet) on a free port, 5 s after /health
# answers, then utime + stime of the router's own process over 30 s (ticks of 1/CLK_TCK s).
# Extra arguments go to `kvroute up` (e.g. --gc-interval 0). Run from the repository root.
set -euo pipefail
PORT=$(.venv/bin/python -c "from workers.ports import free_port; print(free_port())")
.venv/bin/kvroute up --port "$PORT" "$@" > /tmp/idle-cpu-up.log 2>&1 &
PID=$!
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 1; done
sleep 5
t0=$(awk '{print $14 + $15}' "/proc/$PID/stat")
sleep 30
t1=$(awk '{print $14 + $15}' "/proc/$PID/stat")
echo "args=[$*] router pid $PID cpu ticks over 30 s: $((t1 - t0)) (of $(getconf CLK_TCK)/s)"
kill -INT "$PID"
wait "$PID" || true
