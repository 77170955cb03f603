# The fitting scripts that set device-model constants (docs/clock.md), each checked on synthetic
# input with known constants and on bad input.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME scripts.fit_attention_profile
         COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tests/scripts/fit_attention_profile_test.py)
set_tests_properties(scripts.fit_attention_profile PROPERTIES LABELS scripts TIMEOUT 60)

# The in-process kernel A/B (scripts/attention_ab.sh): HEAD's kernel against the working tree's,
# small shapes; the driver stops ("outputs differ") if the two builds' outputs differ, and the test
# passes only on the script's last line. Needs Ninja's benchmark link line and a git checkout; a
# revision that does not exist is a one-line error.
if(KVLAB_BUILD_BENCHMARKS AND CMAKE_GENERATOR MATCHES "Ninja" AND EXISTS ${PROJECT_SOURCE_DIR}/.git)
  add_test(NAME scripts.attention_ab_quick
           COMMAND ${PROJECT_SOURCE_DIR}/scripts/attention_ab.sh HEAD --quick --rounds 3 --build ${PROJECT_BINARY_DIR})
  set_tests_properties(scripts.attention_ab_quick PROPERTIES LABELS scripts TIMEOUT 300 COST 13
    PASS_REGULAR_EXPRESSION "decode, memory, all: outputs agree.*paged-16, memory, all: outputs agree.*prefill, all +B/A speed [0-9.]+.*load average after"
    FAIL_REGULAR_EXPRESSION "outputs differ|Sanitizer|runtime error|attention_ab: ")
  add_test(NAME scripts.attention_ab_unknown_revision
           COMMAND ${PROJECT_SOURCE_DIR}/scripts/attention_ab.sh no-such-revision --quick --build ${PROJECT_BINARY_DIR})
  set_tests_properties(scripts.attention_ab_unknown_revision PROPERTIES LABELS scripts TIMEOUT 60
    PASS_REGULAR_EXPRESSION "attention_ab: no kernels/host_attention.cpp at revision .no-such-revision.")
endif()
