# The binary must not need libcuda or a shared CUDA runtime to start (ldd lists neither).
execute_process(COMMAND ldd ${BINARY} OUTPUT_VARIABLE deps RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ldd failed on ${BINARY}")
endif()
if(deps MATCHES "libcuda\\.so" OR deps MATCHES "libcudart\\.so")
  message(FATAL_ERROR "${BINARY} links CUDA dynamically:\n${deps}")
endif()
message(STATUS "no dynamic CUDA dependency:\n${deps}")
