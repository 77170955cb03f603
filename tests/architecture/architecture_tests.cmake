# The floors of the design, checked on every test run (docs/backend-interface.md):
#  * folders depend one way: alloc <- kernels <- paged, vmm <- serving <- experiments (benchmarks on
#    any); vmm and paged never include each other; only the factory names a concrete backend; the
#    rooms depend one way too: serving/'s (support <- traces <- clock <- replay <- report),
#    experiments/'s (runs <- figures <- cli) and alloc/'s (core <- memory <- faults <- cuda <-
#    transfer <- backend <- contiguous) (scripts/check_layers.py);
#  * no top-level source folder holds more than 25 % of the lines of code (check_layers.py --max-share);
#  * no function of the product outside kernels/ (alloc, paged, vmm, serving, experiments,
#    benchmarks) runs past 80 lines, whitespace and comments included (.clang-tidy's
#    readability-function-size, by scripts/clang_tidy.sh over a clang build's translation units).
# Each checker is also run on a fixture that breaks its rule, so a checker that stopped finding
# anything would fail here.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
set(arch ${PROJECT_SOURCE_DIR}/tests/architecture)
add_test(NAME architecture.layers COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/scripts/check_layers.py
         --root ${PROJECT_SOURCE_DIR} --max-share 25)
# The share rule objects too: in the fixture tree alloc/ holds 5 of its 14 lines.
add_test(NAME architecture.layers_checker_finds_a_big_folder
         COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/scripts/check_layers.py --root ${arch}/fixtures/bad_tree
                 --max-share 30)
set_tests_properties(architecture.layers_checker_finds_a_big_folder PROPERTIES
  PASS_REGULAR_EXPRESSION "alloc/ holds [0-9.]+ % of the code, more than 30 %")
add_test(NAME architecture.layers_checker_finds_violations
         COMMAND Python3::Interpreter ${PROJECT_SOURCE_DIR}/scripts/check_layers.py --root ${arch}/fixtures/bad_tree)
set_tests_properties(architecture.layers_checker_finds_violations PROPERTIES
  PASS_REGULAR_EXPRESSION "alloc/core/upstairs.hpp:2: alloc/core/ must not include alloc/backend/, a room above it.*alloc/upward.hpp:3: alloc/ must not include kernels/.*paged/reaches_tests.cpp:2: paged/ must not include tests/.*vmm/sideways.cpp:2: vmm/ must not include paged/.*replay/upstairs.cpp:2: serving/replay/ must not include serving/report/, a room above it.*side_road.cpp:2: only the factory includes a concrete backend.*side_road.cpp:3: names a concrete backend type outside the factory.*side_road.cpp:3: dynamic_cast")
add_test(NAME architecture.function_size COMMAND ${PROJECT_SOURCE_DIR}/scripts/clang_tidy.sh ${PROJECT_BINARY_DIR})
add_test(NAME architecture.function_size_checker_finds_long_functions
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/clang_tidy.sh --file ${arch}/fixtures/long_function.cpp)
set_tests_properties(architecture.function_size_checker_finds_long_functions PROPERTIES
  PASS_REGULAR_EXPRESSION "long_function.cpp:2:5: error: function 'long_function' exceeds.*84 lines including whitespace")
# clang-tidy parses every translation unit again (about 1.5 minutes on 2 cores): it runs on a clang
# build's compile commands (the fuzz preset, scripts/test.sh's sanitizer stage) and skips elsewhere;
# label tidy, which KVLAB_QUICK=1 leaves out.
set_tests_properties(architecture.function_size architecture.function_size_checker_finds_long_functions PROPERTIES
  SKIP_RETURN_CODE 77 LABELS "architecture;tidy" TIMEOUT 600 COST 56)
# Every source as .clang-format lays it out (skipped, exit 77, without clang-format 14 or git).
add_test(NAME architecture.format COMMAND ${arch}/check_format.sh)
set_tests_properties(architecture.format PROPERTIES SKIP_RETURN_CODE 77)
set_tests_properties(architecture.format architecture.layers architecture.layers_checker_finds_violations
                     architecture.layers_checker_finds_a_big_folder PROPERTIES LABELS architecture)
