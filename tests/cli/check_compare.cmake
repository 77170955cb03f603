# kvlab compare on a small synthetic workload: one table row and one CSV row per backend, each
# result directory reproducible from the command recorded in it; a PNG when matplotlib exists.
file(REMOVE_RECURSE ${OUT} ${OUT}-fail)
file(MAKE_DIRECTORY ${OUT}-fail)
execute_process(COMMAND ${BINARY} compare --backends contiguous-max,contiguous-oracle,paged-16 --requests 60
                        --rate 20 --model llama-3-8b --capacity-gib 1 --no-progress --out ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compare failed (${rc}): ${err}")
endif()
foreach(name contiguous-max contiguous-oracle paged-b16)
  if(NOT out MATCHES "${name}")
    message(FATAL_ERROR "table lacks ${name}:\n${out}")
  endif()
  if(NOT EXISTS ${OUT}/${name}/summary.json OR NOT EXISTS ${OUT}/${name}/steps.csv)
    message(FATAL_ERROR "missing result files for ${name}")
  endif()
  file(READ ${OUT}/${name}/summary.json summary)
  if(NOT summary MATCHES "\"command\": \"kvlab compare")
    message(FATAL_ERROR "${name}/summary.json does not record the command")
  endif()
endforeach()
file(STRINGS ${OUT}/compare.csv lines)
list(LENGTH lines n)
if(NOT n EQUAL 4)  # header, three backends: plain CSV
  message(FATAL_ERROR "compare.csv has ${n} lines")
endif()
# The command and its provenance are in run.json beside it.
file(READ ${OUT}/run.json run)
string(JSON command GET "${run}" command)
string(JSON requests GET "${run}" provenance options requests)
if(NOT command MATCHES "^kvlab compare --backends" OR NOT requests STREQUAL "60")
  message(FATAL_ERROR "run.json does not record the command and its options:
${run}")
endif()
if(out MATCHES "chart: ")
  if(NOT EXISTS ${OUT}/compare.png)
    message(FATAL_ERROR "chart announced but ${OUT}/compare.png is missing")
  endif()
endif()
message(STATUS "${out}")
# The backend counters (summary.json's "counters", by name) are columns of compare.csv, empty for a
# backend without that counter.
list(GET lines 0 header)
list(GET lines 1 contiguous_row)
list(GET lines 3 paged_row)
if(NOT header MATCHES ",cow_copies,compaction_moves,free_blocks,cached_free_blocks,prefix_lookups,prefix_hit_blocks,prefix_inserted_blocks,prefix_evictions$")
  message(FATAL_ERROR "compare.csv lacks the paged counters: ${header}")
endif()
if(NOT contiguous_row MATCHES ",,,,,,,,$" OR NOT paged_row MATCHES ",[0-9]+,[0-9]+,[0-9]+,[0-9]+,[0-9]+,[0-9]+,[0-9]+,[0-9]+$")
  message(FATAL_ERROR "counter cells wrong:\n${contiguous_row}\n${paged_row}")
endif()

# A chart that fails to draw (here a plot script that raises, as on a full disk) fails the run:
# exit 1, one line naming the chart and the script's error (no traceback), no compare.png and no
# completion marker; the data files stand.
file(WRITE ${OUT}-fail/plot.py "import sys\nraise OSError(28, 'No space left on device')\n")
set(ENV{KVLAB_PLOT_SCRIPT} ${OUT}-fail/plot.py)
execute_process(COMMAND ${BINARY} compare --backends contiguous-max,paged-16 --requests 10 --rate 20 --model llama-3-8b
                        --capacity-gib 1 --no-progress --out ${OUT}-fail/c
                RESULT_VARIABLE rc OUTPUT_VARIABLE fout ERROR_VARIABLE ferr)
unset(ENV{KVLAB_PLOT_SCRIPT})
string(STRIP "${ferr}" ferr)
if(out MATCHES "chart: " AND (NOT rc EQUAL 1 OR NOT ferr MATCHES "^kvlab compare: failed: .*drawing .*/compare.png failed .scripts/plot.py compare.: OSError: .Errno 28. No space left on device$"
                              OR ferr MATCHES "\n" OR EXISTS ${OUT}-fail/c/compare.png OR EXISTS ${OUT}-fail/c/complete.json
                              OR NOT EXISTS ${OUT}-fail/c/compare.csv))
  message(FATAL_ERROR "a failed chart: exit ${rc}, expected 1 with one line, no chart and no marker:\n${ferr}")
endif()

# An older run's chart never stands beside new data: a replay into the compare's folder removes it.
if(EXISTS ${OUT}/compare.png)
  execute_process(COMMAND ${BINARY} replay --backend paged-64 --requests 10 --rate 20 --model llama-3-8b
                          --capacity-gib 1 --no-progress --out ${OUT} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE rerr)
  if(NOT rc EQUAL 0 OR EXISTS ${OUT}/compare.png)
    message(FATAL_ERROR "a replay into a compare's folder left its compare.png (exit ${rc}): ${rerr}")
  endif()
endif()
