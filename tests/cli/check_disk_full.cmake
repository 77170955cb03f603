# No silent loss: a write that fails makes kvlab exit non-zero with one line naming what was lost,
# and never leaves a truncated or temporary file behind (serving/support/atomic_file.hpp).
#   * stdout on a full disk (/dev/full): `kvlab models`, `kvlab replay`;
#   * `kvlab collect DIR /dev/full`: the error, and /dev/full still a device (written in place);
#   * a full disk inside --out, injected with KVLAB_FAIL_WRITES_AFTER_BYTES=N at several N: the
#     files of an earlier complete run stay complete, no *.tmp.* file, nothing in a fresh directory;
#   * an --out that cannot be used is refused before the replay starts (nothing on stdout).
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(run_args compare --backends paged-16,vmm-64k --requests 20 --rate 20 --model llama-3-8b --capacity-gib 1
             --no-progress)

# expect_failure(WHAT RC PATTERN): the last run exited RC with exactly one stderr line matching PATTERN.
macro(expect_failure what want pattern)
  if(NOT rc EQUAL ${want})
    message(FATAL_ERROR "${what}: exit ${rc}, expected ${want}; stderr: ${err}")
  endif()
  if(NOT err MATCHES "^[^\n]+\n$" OR NOT err MATCHES "${pattern}")
    message(FATAL_ERROR "${what}: stderr is not one line matching '${pattern}': '${err}'")
  endif()
endmacro()

# --- stdout on a full disk ------------------------------------------------------------------------
foreach(cmd "models" "version" "replay --requests 5 --no-progress")
  execute_process(COMMAND sh -c "exec \"$0\" ${cmd} >/dev/full" ${BINARY} RESULT_VARIABLE rc ERROR_VARIABLE err)
  expect_failure("kvlab ${cmd} >/dev/full" 1 "^kvlab [a-z]+: failed: cannot write to stdout: No space left on device")
endforeach()

# --- collect's CSV on a full disk -----------------------------------------------------------------
file(WRITE ${OUT}/sweep/point-0001/compare.csv "# kvlab replay\nbackend,x\npaged-b16,1\n")
file(WRITE ${OUT}/sweep/point-0001/complete.json
     "{\"complete\": true, \"files\": [{\"path\": \"compare.csv\", \"bytes\": 37}]}\n")
execute_process(COMMAND ${BINARY} collect ${OUT}/sweep /dev/full RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
expect_failure("kvlab collect DIR /dev/full" 1 "failed: .*cannot write /dev/full: No space left on device")
execute_process(COMMAND test -c /dev/full RESULT_VARIABLE is_device)
if(NOT is_device EQUAL 0)
  message(FATAL_ERROR "kvlab collect replaced the device /dev/full")
endif()

# --- a full disk inside --out ---------------------------------------------------------------------
set(D ${OUT}/run)
execute_process(COMMAND ${BINARY} ${run_args} --out ${D} RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the complete run failed (${rc}): ${err}")
endif()
file(GLOB_RECURSE before RELATIVE ${D} ${D}/*)
list(SORT before)
set(csvs paged-b16/steps.csv paged-b16/requests.csv vmm-64k/steps.csv vmm-64k/requests.csv)
foreach(f IN LISTS csvs)
  file(SHA256 ${D}/${f} hash_${f})
endforeach()
# The files in the order kvlab writes them; N is set to fail inside the first, the second, the
# fourth (the second backend's) and the last.
set(total 0)
foreach(f paged-b16/steps.csv paged-b16/requests.csv paged-b16/summary.json vmm-64k/steps.csv vmm-64k/requests.csv
          vmm-64k/summary.json run.json compare.csv)
  file(SIZE ${D}/${f} bytes)
  math(EXPR total "${total} + ${bytes}")
  if(f STREQUAL "paged-b16/steps.csv")
    math(EXPR in_second "${total} + 100")
  elseif(f STREQUAL "paged-b16/summary.json")
    math(EXPR in_fourth "${total} + 1000")
  endif()
endforeach()
# compare.csv is written last; aim at its middle, because the summaries before it carry wall times
# whose printed width varies from run to run by a few bytes.
file(SIZE ${D}/compare.csv compare_bytes)
math(EXPR in_last "${total} - ${compare_bytes} / 2")
foreach(n 0 1000 ${in_second} ${in_fourth} ${in_last})
  execute_process(COMMAND ${CMAKE_COMMAND} -E env KVLAB_FAIL_WRITES_AFTER_BYTES=${n} ${BINARY} ${run_args} --out ${D}
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
  expect_failure("KVLAB_FAIL_WRITES_AFTER_BYTES=${n}" 1
                 "^kvlab compare: failed: .*cannot write ${D}/[^ ]+: No space left on device\n$")
  # The failed re-run removed the completion marker first (so the old files, complete as they are,
  # no longer claim to be this run's), and changed nothing else.
  if(EXISTS ${D}/complete.json)
    message(FATAL_ERROR "N=${n}: a failed re-run left the completion marker")
  endif()
  file(GLOB_RECURSE after RELATIVE ${D} ${D}/*)
  list(APPEND after complete.json)
  list(SORT after)
  if(NOT after STREQUAL before)
    message(FATAL_ERROR "N=${n}: the files changed from '${before}' to '${after}' (a partial or temporary file)")
  endif()
  foreach(f IN LISTS csvs)  # the same command: a complete file has the same bytes
    file(SHA256 ${D}/${f} h)
    if(NOT h STREQUAL hash_${f})
      message(FATAL_ERROR "N=${n}: ${f} is no longer complete")
    endif()
  endforeach()
  foreach(f paged-b16/summary.json vmm-64k/summary.json)
    file(READ ${D}/${f} s)
    if(NOT s MATCHES "^{\n.*\n}\n$")
      message(FATAL_ERROR "N=${n}: ${f} is cut short")
    endif()
  endforeach()
  message(STATUS "N=${n}: ${err}")
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -E env KVLAB_FAIL_WRITES_AFTER_BYTES=0 ${BINARY} ${run_args} --out ${OUT}/fresh
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
expect_failure("a full disk in a fresh --out" 1 "cannot write ${OUT}/fresh/paged-b16/steps.csv: No space left on device")
file(GLOB_RECURSE left ${OUT}/fresh/*)
if(left)
  message(FATAL_ERROR "a failed run into a fresh directory left files: ${left}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env KVLAB_FAIL_WRITES_AFTER_BYTES=1000000000 ${BINARY} ${run_args}
                        --out ${OUT}/roomy RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT EXISTS ${OUT}/roomy/compare.csv)
  message(FATAL_ERROR "a run within the injected limit failed (${rc}): ${err}")
endif()

# --- an unusable --out is refused before the replay starts -----------------------------------------
foreach(case "/proc/kvlab-no-such-dir;1;cannot create directory /proc/kvlab-no-such-dir"
             "${D}/compare.csv;2;--out ${D}/compare.csv: is not a directory"
             "${D}/compare.csv/sub;1;cannot create directory ${D}/compare.csv/sub: Not a directory")
  list(GET case 0 dir)
  list(GET case 1 want)
  list(GET case 2 pattern)
  execute_process(COMMAND ${BINARY} ${run_args} --out ${dir} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  expect_failure("--out ${dir}" ${want} "${pattern}")
  if(NOT out STREQUAL "")
    message(FATAL_ERROR "--out ${dir}: refused only after the replay started:\n${out}")
  endif()
endforeach()
message(STATUS "no silent loss: stdout, collect, injected full disk and --out checks passed")
