#!/bin/sh
# Runs that can be trusted when they overlap, are interrupted or killed (experiments/runs/run_control.hpp):
#   1. two runs into one --out: the second fails at once (exit 1, one line naming the directory and
#      the holder's pid and command); the first completes intact;
#   2. an interrupted re-run removes the old completion marker first (old files never look complete);
#   3. SIGINT / SIGTERM / SIGHUP stop replay and compare between steps: exit 130 / 143 / 129, one line
#      "interrupted", no marker, no temporary file, no lock file;
#   4. a sweep owns its children: SIGINT to the sweep stops them all (exit 130); SIGKILL to the sweep
#      still stops them (PR_SET_PDEATHSIG); a resume refuses a point whose replay is still alive,
#      then completes every point, each with a valid marker, and collects one row per point;
#   5. figures too: one run per figure folder, SIGINT stops them between steps (exit 130, no
#      marker), and a finished figure has a marker naming its files.
# Usage: check_run_control.sh KVLAB WORKDIR
set -u
K=$1
T=$2
rm -rf "$T"
mkdir -p "$T"
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# A replay of a few seconds (every KV byte written and read back after every step).
slow() {
  echo "replay --requests $1 --verify-kv --model yi-6b --capacity-gib 0.05 --prompt-len uniform:16:64 --output-len uniform:8:40 --no-progress"
}
# wait_until CMD...: polls CMD every 50 ms for up to 30 s.
wait_until() {
  i=0
  until "$@"; do
    i=$((i + 1))
    [ $i -gt 600 ] && fail "timed out waiting for: $*"
    sleep 0.05
  done
}
one_line() {  # one_line FILE PATTERN: FILE is exactly one line and matches PATTERN (grep -E)
  [ "$(wc -l <"$1")" -eq 1 ] || fail "$1 is not one line: $(cat "$1")"
  grep -Eq -- "$2" "$1" || fail "$1 does not match '$2': $(cat "$1")"
}
no_leftovers() {  # no_leftovers DIR: no temporary file, no lock file left under DIR
  left=$(find "$1" -name '*.tmp.*' -o -name .kvlab.lock)
  [ -z "$left" ] || fail "left behind: $left"
}
# kvlab processes whose command line mentions $1 (read from /proc: no procps needed).
running_with() {
  for f in /proc/[0-9]*/cmdline; do
    tr '\0' ' ' <"$f" 2>/dev/null | grep -q -- "$1" && echo "${f%/cmdline}"
  done
}
none_running_with() { [ -z "$(running_with "$1")" ]; }

# --- 1. one run per --out -----------------------------------------------------------------------------
D=$T/locked
"$K" $(slow 60) --out "$D" >"$T/first.out" 2>"$T/first.err" &
first=$!
wait_until test -s "$D/.kvlab.lock"
"$K" replay --requests 5 --no-progress --out "$D" >"$T/second.out" 2>"$T/second.err"
rc=$?
[ $rc -eq 1 ] || fail "a second run into a locked --out exited $rc"
one_line "$T/second.err" "^kvlab replay: failed: $D is in use by another kvlab run \(pid $first: kvlab replay --requests 60 .*--out $D\)"
[ -s "$T/second.out" ] && fail "the refused run printed: $(cat "$T/second.out")"
wait $first
rc=$?
[ $rc -eq 0 ] || fail "the first run failed ($rc): $(cat "$T/first.err")"
[ -f "$D/complete.json" ] || fail "the first run left no completion marker"
grep -q -- "--requests 60" "$D/run.json" || fail "run.json is not the first run's"
grep -q '"path": "paged-b16/steps.csv"' "$D/complete.json" || fail "the marker does not name the files"
no_leftovers "$D"
echo "1. lock: ok"

# --- 1b. temporaries a killed run left: removed by the next run that holds the lock, unless their
# process still runs (PID 1 always does)
dead=4194305  # above the kernel's largest pid_max: no process has it
printf 'partial' > "$D/paged-b16/steps.csv.tmp.$dead"
printf 'partial' > "$D/compare.csv.tmp.$dead"
printf 'live' > "$D/compare.csv.tmp.1"
"$K" replay --requests 5 --no-progress --out "$D" >/dev/null 2>&1 || fail "the run after a killed one failed"
[ -e "$D/paged-b16/steps.csv.tmp.$dead" ] && fail "a dead run's temporary survived the next run"
[ -e "$D/compare.csv.tmp.$dead" ] && fail "a dead run's temporary survived the next run (top level)"
[ -e "$D/compare.csv.tmp.1" ] || fail "a live process's temporary was removed"
rm -f "$D/compare.csv.tmp.1"
echo "1b. temporaries of dead runs: ok"

# --- 2 and 3. interrupts; an interrupted re-run leaves no marker --------------------------------------
for sig in INT TERM HUP; do
  case $sig in INT) want=130 ;; TERM) want=143 ;; HUP) want=129 ;; esac
  "$K" $(slow 100000) --out "$D" >/dev/null 2>"$T/int.err" &
  pid=$!
  wait_until test -s "$D/.kvlab.lock"
  [ -f "$D/complete.json" ] && fail "a re-run kept the old completion marker while running"
  sleep 0.3
  kill -$sig $pid
  wait $pid
  rc=$?
  [ $rc -eq $want ] || fail "SIG$sig: exit $rc, expected $want"
  one_line "$T/int.err" "^kvlab replay: interrupted$"
  [ -f "$D/complete.json" ] && fail "SIG$sig: an interrupted run left a completion marker"
  no_leftovers "$D"
done
"$K" compare --backends paged-16,vmm-64k $(slow 100000 | sed 's/^replay //') --out "$T/cmp" >/dev/null 2>"$T/cmp.err" &
pid=$!
wait_until test -s "$T/cmp/.kvlab.lock"
sleep 0.3
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 143 ] || fail "compare after SIGTERM: exit $rc"
one_line "$T/cmp.err" "^kvlab compare: interrupted$"
[ -e "$T/cmp/compare.csv" ] || [ -e "$T/cmp/complete.json" ] && fail "an interrupted compare wrote compare.csv or its marker"
no_leftovers "$T/cmp"
echo "2, 3. interrupts: ok"

# --- 4. a sweep owns its children ---------------------------------------------------------------------
S=$T/sweep
printf 'requests = 20 | 24 | 28 | 32\nfixed = --verify-kv --model yi-6b --capacity-gib 0.05 --prompt-len uniform:16:64 --output-len uniform:8:40\n' >"$T/slow.sweep"
"$K" sweep "$T/slow.sweep" -j 2 --no-progress --out "$S" >/dev/null 2>"$T/sweep.err" &
pid=$!
wait_until test -s "$S/point-0001/.kvlab.lock"
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "sweep after SIGINT: exit $rc: $(cat "$T/sweep.err")"
one_line "$T/sweep.err" "^kvlab sweep: interrupted$"
none_running_with "$S/point-" || fail "SIGINT to the sweep left replays running: $(running_with "$S/point-")"
[ -f "$S/point-0001/complete.json" ] && fail "an interrupted point has a completion marker"
no_leftovers "$S"

"$K" sweep "$T/slow.sweep" -j 2 --no-progress --out "$S" >/dev/null 2>&1 &
pid=$!
wait_until test -s "$S/point-0002/.kvlab.lock"
kill -KILL $pid
wait $pid 2>/dev/null
wait_until none_running_with "$S/point-"  # PR_SET_PDEATHSIG: the children stop too

# A point whose replay is still alive is never run twice: the resume refuses, naming it.
"$K" $(slow 100000) --out "$S/point-0003" >/dev/null 2>&1 &
stray=$!
wait_until test -s "$S/point-0003/.kvlab.lock"
"$K" sweep "$T/slow.sweep" -j 2 --no-progress --out "$S" >"$T/resume.out" 2>"$T/resume.err"
rc=$?
[ $rc -eq 1 ] || fail "a resume beside a live point exited $rc"
one_line "$T/resume.err" "point-0003 is still being run by an earlier sweep's replay \(pid $stray: "
kill -TERM $stray
wait $stray

"$K" sweep "$T/slow.sweep" -j 2 --no-progress --out "$S" >"$T/resume.out" 2>"$T/resume.err"
rc=$?
[ $rc -eq 0 ] || fail "the resumed sweep failed ($rc): $(cat "$T/resume.err")"
for p in 0001 0002 0003 0004; do
  [ -f "$S/point-$p/complete.json" ] || fail "point-$p has no completion marker after the resume"
done
grep -q -- "--requests 28" "$S/point-0003/run.json" || fail "point-0003 holds another command's results"
[ "$(wc -l <"$S/collected.csv")" -eq 5 ] || fail "collected.csv: $(cat "$S/collected.csv")"
no_leftovers "$S"
echo "4. sweep children: ok"

# --- 5. figures --------------------------------------------------------------------------------------
F=$T/figs
"$K" figure all --full --no-progress --out "$F" >/dev/null 2>"$T/fig.err" &
pid=$!
wait_until test -s "$F/block-size/.kvlab.lock"
"$K" figure block-size --no-progress --out "$F" >"$T/fig2.out" 2>"$T/fig2.err"
rc=$?
[ $rc -eq 1 ] || fail "a second figure into a locked folder exited $rc"
one_line "$T/fig2.err" "^kvlab figure: failed: $F/block-size is in use by another kvlab run \(pid $pid: kvlab figure all"
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "figure after SIGINT: exit $rc: $(cat "$T/fig.err")"
one_line "$T/fig.err" "^kvlab figure: interrupted$"
[ -n "$(find "$F" -name complete.json)" ] && fail "an interrupted figure run left a completion marker"
no_leftovers "$F"
"$K" figure batch-size --no-progress --out "$F" >/dev/null 2>"$T/fig3.err" || fail "figure batch-size failed: $(cat "$T/fig3.err")"
grep -q '"path": "data.csv"' "$F/batch-size/complete.json" || fail "the figure's marker does not name data.csv"
no_leftovers "$F"
echo "5. figures: ok"
