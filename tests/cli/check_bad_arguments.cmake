# Bad arguments: exit code 2 and one line on stderr that names the problem, never a crash.
foreach(args "replay;--model;no-such-model" "replay;--policy;sideways" "replay;--requests;-3"
             "replay;--capacity-gib;abc" "no-such-command" "replay;--no-such-flag")
  execute_process(COMMAND ${BINARY} ${args} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  string(STRIP "${err}" err)
  string(REGEX MATCHALL "\n" lines "${err}")
  list(LENGTH lines extra_lines)
  if(NOT rc EQUAL 2 OR err STREQUAL "" OR extra_lines GREATER 0)
    message(FATAL_ERROR "kvlab ${args}: expected exit 2 and one line on stderr, got rc=${rc}: '${err}'")
  endif()
  message(STATUS "kvlab ${args} -> ${err}")
endforeach()
