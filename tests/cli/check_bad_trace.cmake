# A malformed trace: exit 2 and one line naming FILE:LINE and the field; a missing trace names the
# download script.
file(MAKE_DIRECTORY ${OUT})
file(WRITE ${OUT}/bad.csv "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,abc,20\n")
execute_process(COMMAND ${BINARY} replay --trace ${OUT}/bad.csv --no-progress RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
string(STRIP "${err}" err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "bad.csv:3" OR NOT err MATCHES "ContextTokens" OR err MATCHES "\n")
  message(FATAL_ERROR "bad trace: rc=${rc} '${err}'")
endif()
execute_process(COMMAND ${BINARY} replay --trace no_such_trace.csv --trace-dir ${OUT} --no-progress
                RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 2 OR NOT err MATCHES "download_traces.sh")
  message(FATAL_ERROR "missing trace: rc=${rc} '${err}'")
endif()
message(STATUS "ok: ${err}")
