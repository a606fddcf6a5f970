#!/usr/bin/env bash
# Round 7's CPU A/B of the legacy SSE echo. The script that made cpu.txt here is now
# bench/cpu-ab.sh (KIND=legacy-sse is this measurement, unchanged: a fresh host per rep on
# CPU 1, one session, wrk c=64 on CPU 0 for 8 s after 2 s of warm-up); its original text is
# in git (`git show 45139ae:bench/results/issue23-2026-12-05-cpu/run.sh`).
#   BUILDS="before=PATH after=PATH" REPS=5 OUT=DIR bash run.sh
exec env KIND=legacy-sse bash "$(dirname "$0")/../../cpu-ab.sh" "$@"
