# The measured figures (kernel-overhead, page-size, overlap, multi-tenant's page layouts) on the emulated GPU (`kvlab figure NAME --device emulated`): the CUDA code
# path (device memory from the driver double, the CUDA kernels under the SIMT emulator) writes a
# complete figure whose README names the device, with every backend's row, and the default --out
# for a device is not results/.
# -DBINARY=kvlab -DOUT=DIR
# Fails unless every pattern after `lines` matches one of the figure's data rows.
function(require_rows figure lines)
  foreach(pattern ${ARGN})
    if(NOT lines MATCHES "${pattern}")
      message(FATAL_ERROR "${figure}: no data row matches '${pattern}':\n${lines}")
    endif()
  endforeach()
endfunction()

file(REMOVE_RECURSE ${OUT})
foreach(name kernel-overhead page-size overlap multi-tenant)
  execute_process(COMMAND ${BINARY} figure ${name} --device emulated --no-progress --out ${OUT}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvlab figure ${name} --device emulated failed (${rc}): ${out} ${err}")
  endif()
endforeach()
foreach(name kernel-overhead page-size overlap multi-tenant)
  foreach(f data.csv README.md complete.json)
    if(NOT EXISTS ${OUT}/${name}/${f})
      message(FATAL_ERROR "${name}: ${f} missing")
    endif()
  endforeach()
  file(READ ${OUT}/${name}/README.md readme)
  if(NOT readme MATCHES "\n- device: emulated GPU \\(CUDA driver double" OR NOT readme MATCHES "--device emulated")
    message(FATAL_ERROR "${name}: the README does not name the emulated device and the command:\n${readme}")
  endif()
endforeach()
# kernel-overhead: kvlab's kernels (FlashInfer's run on a GPU only), decode and prefill, each through contiguous, paged-1/16/256 and vmm-2m.
file(STRINGS ${OUT}/kernel-overhead/data.csv lines)
list(POP_FRONT lines header)
list(LENGTH lines rows)
if(NOT rows EQUAL 10)
  message(FATAL_ERROR "kernel-overhead on the emulated device: ${rows} rows, not 10:\n${lines}")
endif()
set(wanted "")
foreach(backend contiguous-oracle paged-1 paged-16 paged-256 vmm-2m)
  list(APPEND wanted "kvlab,kvlab,decode,24,${backend},[0-9.]+" "kvlab,kvlab,prefill,24,${backend},[0-9.]+")
endforeach()
require_rows(kernel-overhead "${lines}" ${wanted})
# page-size: the driver's 2 MiB granularity and its multiples only, each mapped and unmapped.
file(STRINGS ${OUT}/page-size/data.csv lines)
list(POP_FRONT lines header)
require_rows(page-size "${lines}" "2m,per-layer,[0-9.]+,[0-9.]+," "4m,per-layer,[0-9.]+,[0-9.]+,"
             "8m,per-layer,[0-9.]+,[0-9.]+," "16m,per-layer,[0-9.]+,[0-9.]+,")
# overlap: the measured half through the CUDA code path, synchronous and background mapping.
file(STRINGS ${OUT}/overlap/data.csv lines)
require_rows(overlap "${lines}" "measured \\(emulated\\),2m-mega,synchronous,[0-9.]+"
             "measured \\(emulated\\),2m-mega,background,[0-9.]+")
file(STRINGS ${OUT}/page-size/data.csv lines)
if(lines MATCHES "(^|;)(4k|64k|256k),")
  message(FATAL_ERROR "page-size on the emulated device measured a page below the 2 MiB granularity:\n${lines}")
endif()
# multi-tenant: the page layouts in execute mode on the device (paged-16, per-layer and interleaved
# pages), each with a measured attention time.
file(STRINGS ${OUT}/multi-tenant/layout.csv lines)
require_rows(multi-tenant "${lines}" "paged-b16,3,[0-9]+,1,[0-9.]+," "elastic-16-2m,3,[0-9]+,1,[0-9.]+,"
             "elastic-16-2m-interleaved,3,[0-9]+,1,[0-9.]+,")
