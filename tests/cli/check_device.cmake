# kvlab replay/compare --device emulated: the CUDA code path end to end without a GPU (KV pools and
# vmm pages from the CUDA driver double, the CUDA kernels under the SIMT emulator), on the smallest
# preset with one executed layer. Each backend family completes every request with every KV byte
# verified; copy-on-write runs (beams); a compare writes its table; faults injected at driver calls
# and copies lose nothing; the device is left clean (kvlab fails the run otherwise).
file(REMOVE_RECURSE ${OUT})
set(common --device emulated --execute --verify-kv --execute-layers 1 --model yi-6b --capacity-gib 0.25
           --max-seq-len 256 --requests 8 --rate 50 --prompt-len uniform:8:40 --output-len uniform:2:10 --no-progress)

# run(NAME ARGS...): runs kvlab, fails the test unless it exits 0; leaves stdout in `out`.
function(run name)
  execute_process(COMMAND ${BINARY} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e TIMEOUT 500)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: exit ${rc}\nstdout:\n${o}\nstderr:\n${e}")
  endif()
  if(NOT o MATCHES "device: emulated GPU .CUDA driver double, 2 MiB granularity")
    message(FATAL_ERROR "${name}: no emulated device line:\n${o}")
  endif()
  set(out "${o}" PARENT_SCOPE)
endfunction()

# verified(NAME BACKEND_ROW): every request completed, no mismatch, the clock measured.
function(verified name row)
  if(NOT out MATCHES "${row}: 0 requests failed with a reason, 0 rejected, [1-9][0-9]* token reads verified, 0 KV mismatches")
    message(FATAL_ERROR "${name}: integrity line missing or wrong:\n${out}")
  endif()
  file(READ ${OUT}/${name}/${row}/summary.json s)
  if(NOT s MATCHES "\"completed\": 8," OR NOT s MATCHES "\"kv_mismatches\": 0," OR NOT s MATCHES "\"clock\": \"measured\""
     OR NOT s MATCHES "\"device\": \"emulated\"")
    message(FATAL_ERROR "${name}: summary.json:\n${s}")
  endif()
  set(summary "${s}" PARENT_SCOPE)
endfunction()

run(contiguous replay ${common} --backend contiguous-max --out ${OUT}/contiguous)
verified(contiguous contiguous-max)

run(paged replay ${common} --backend paged-16 --samples 3 --beam-reselect 0.3 --out ${OUT}/paged)
verified(paged paged-b16)
if(NOT summary MATCHES "\"cow_copies\": [1-9]")
  message(FATAL_ERROR "paged: no copy-on-write ran (the batched copy kernel on the emulated device):\n${summary}")
endif()

run(vmm replay ${common} --backend vmm-2m-mega --out ${OUT}/vmm)
verified(vmm vmm-2m-mega)
if(NOT summary MATCHES "\"critical_maps\": [1-9]")
  message(FATAL_ERROR "vmm: no page was mapped through the driver:\n${summary}")
endif()

run(compare compare ${common} --backends contiguous-oracle,paged-16,vmm-2m --out ${OUT}/compare)
file(STRINGS ${OUT}/compare/compare.csv lines)
list(LENGTH lines n)
if(NOT n EQUAL 4)  # header, three backends
  message(FATAL_ERROR "compare.csv has ${n} lines")
endif()
foreach(row contiguous-oracle paged-b16 vmm-2m)
  if(NOT out MATCHES "${row}: 0 requests failed with a reason, 0 rejected, [1-9][0-9]* token reads verified, 0 KV mismatches")
    message(FATAL_ERROR "compare: ${row} not verified clean:\n${out}")
  endif()
endforeach()

# Faults at the driver's calls and at copies: requests may fail (with a reason), nothing is lost.
foreach(backend paged-16 vmm-2m-mega)
  run(faults-${backend} replay ${common} --backend ${backend} --samples 2 --beam-reselect 0.3
      --inject-faults random:0.03:7)
  if(NOT out MATCHES ": [1-9][0-9]* faults injected, [0-9]+ requests failed with a reason, [0-9]+ rejected, [1-9][0-9]* token reads verified, 0 KV mismatches")
    message(FATAL_ERROR "faults-${backend}: no fault injected or KV lost:\n${out}")
  endif()
endforeach()
# A fault at teardown (every cuMemUnmap refused once a backend finished, as on the H200) keeps
# every backend's results, records the fault with them, names the refusing call and its CUresult,
# goes on to the next backend, and exits non-zero.
execute_process(COMMAND ${BINARY} compare ${common} --backends contiguous-oracle,vmm-2m,paged-16 --inject-faults teardown
                        --out ${OUT}/teardown
                RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e TIMEOUT 500)
if(rc EQUAL 0 OR NOT e MATCHES "backend contiguous-oracle left the device unclean: 2 deallocation\\(s\\) the driver refused \\(cuMemUnmap: CUDA_ERROR_UNKNOWN \\(999\\) x2\\)"
   OR NOT e MATCHES "3 of 3 backend\\(s\\) left the device unclean")
  message(FATAL_ERROR "teardown: exit ${rc}, expected non-zero with the refusing call named\nstdout:\n${o}\nstderr:\n${e}")
endif()
foreach(row contiguous-oracle vmm-2m paged-b16)
  file(READ ${OUT}/teardown/${row}/summary.json s)
  if(NOT s MATCHES "\"completed\": 8," OR NOT s MATCHES "\"device_fault\": \"--device emulated: backend ${row} left the device unclean")
    message(FATAL_ERROR "teardown: ${row}'s results or its fault are missing:\n${s}")
  endif()
endforeach()
# The mappings the vmm backend could not unmap stay in the driver: they are its fault, named once,
# not paged-16's, which names only its own two blocks (KV pool and staging).
string(REGEX MATCHALL "not unmapped" unmapped "${s}")
list(LENGTH unmapped n)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "teardown: paged-b16's fault names ${n} mappings, expected its own 2:\n${s}")
endif()
if(NOT EXISTS ${OUT}/teardown/compare.csv OR NOT EXISTS ${OUT}/teardown/complete.json)
  message(FATAL_ERROR "teardown: compare.csv or complete.json missing: the finished measurements were thrown away")
endif()
file(READ ${OUT}/compare/contiguous-oracle/summary.json s)
if(NOT s MATCHES "\"device_fault\": null")
  message(FATAL_ERROR "a clean run must record device_fault null:\n${s}")
endif()

# KVLAB_DRIVER_LOG=FILE: every driver call, its arguments and its CUresult, one line each.
file(REMOVE ${OUT}/driver.log)
set(ENV{KVLAB_DRIVER_LOG} ${OUT}/driver.log)
run(logged replay ${common} --backend vmm-2m --out ${OUT}/logged)
unset(ENV{KVLAB_DRIVER_LOG})
file(READ ${OUT}/driver.log log)
foreach(line "# kvlab CUDA driver log, pid [0-9]+, headers CUDA [0-9]+" "cuCtxSynchronize@2000"
             "\n[0-9]+\\.[0-9]+ 0 cuMemCreate\\(0x[0-9a-f]+->[0-9]+, 2097152, 0x[0-9a-f]+{type=1, location=1:0}, 0\\) = CUDA_SUCCESS \\(0\\)"
             " cuMemMap\\(0x[0-9a-f]+, 2097152, 0, [0-9]+, 0\\) = CUDA_SUCCESS" " cuMemUnmap\\(0x" " cuCtxSynchronize\\(\\) = CUDA_SUCCESS")
  if(NOT log MATCHES "${line}")
    message(FATAL_ERROR "driver log has no line matching '${line}':\n${log}")
  endif()
endforeach()
message(STATUS "emulated device: every backend verified clean")
