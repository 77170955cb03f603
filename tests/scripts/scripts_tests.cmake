# The fitting scripts that set device-model constants (docs/clock.md), each checked on synthetic
# input with known constants and on bad input.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME scripts.fit_attention_profile
         COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/tests/scripts/fit_attention_profile_test.py)
set_tests_properties(scripts.fit_attention_profile PROPERTIES LABELS scripts TIMEOUT 60)
