# Tests of the kvlab binary as a user runs it.
add_test(NAME cli.starts_without_driver COMMAND $<TARGET_FILE:kvlab> devices)
set_tests_properties(cli.starts_without_driver PROPERTIES LABELS cli PASS_REGULAR_EXPRESSION "host")
add_test(NAME cli.links_no_dynamic_cuda
         COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:kvlab> -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_no_dynamic_cuda.cmake)
set_tests_properties(cli.links_no_dynamic_cuda PROPERTIES LABELS cli)
add_test(NAME cli.bad_argument_exit_2 COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:kvlab>
         -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_bad_arguments.cmake)
set_tests_properties(cli.bad_argument_exit_2 PROPERTIES LABELS cli)
add_test(NAME cli.replay_synthetic COMMAND $<TARGET_FILE:kvlab> replay --requests 40 --no-progress)
set_tests_properties(cli.replay_synthetic PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "token_states.*reserved.*internal.*external")
# Beam search from the command line: beams fork from each other, and every KV byte reads back.
add_test(NAME cli.beam_search COMMAND $<TARGET_FILE:kvlab> replay --backend paged-16 --requests 12
         --prompt-len uniform:16:64 --output-len uniform:8:40 --samples 3 --beam-reselect 0.5 --verify-kv
         --model yi-6b --capacity-gib 0.05 --no-progress)
set_tests_properties(cli.beam_search PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "paged-b16: 0 requests failed with a reason, 0 rejected, [1-9][0-9]* token reads verified, 0 KV mismatches")
# --device emulated: the CUDA code path (driver double, SIMT emulator) end to end for every family.
add_test(NAME cli.device_emulated
         COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:kvlab> -DOUT=${CMAKE_CURRENT_BINARY_DIR}/cli-device
         -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_device.cmake)
set_tests_properties(cli.device_emulated PROPERTIES LABELS "cli;emulated-e2e" TIMEOUT 900)
add_test(NAME cli.help_has_examples COMMAND $<TARGET_FILE:kvlab> replay --help)
set_tests_properties(cli.help_has_examples PROPERTIES LABELS cli PASS_REGULAR_EXPRESSION "Examples:")
add_test(NAME cli.compare_writes_csv_and_chart
         COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:kvlab> -DOUT=${CMAKE_CURRENT_BINARY_DIR}/cli-compare
         -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_compare.cmake)
set_tests_properties(cli.compare_writes_csv_and_chart PROPERTIES LABELS cli)
add_test(NAME cli.trace_errors_name_file_line_field
         COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:kvlab> -DOUT=${CMAKE_CURRENT_BINARY_DIR}/cli-bad-trace
         -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_bad_trace.cmake)
set_tests_properties(cli.trace_errors_name_file_line_field PROPERTIES LABELS cli)
# The measured figures through the CUDA code path on the emulated GPU.
add_test(NAME figures.device_emulated
         COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:kvlab> -DOUT=${CMAKE_CURRENT_BINARY_DIR}/figure-device-emulated
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_figure_device.cmake)
set_tests_properties(figures.device_emulated PROPERTIES LABELS "figures;emulated-e2e" TIMEOUT 900 FIXTURES_SETUP figures_device)
# Every paper figure at smoke scale, so none rots (CI runs this with the rest of ctest), in two
# tests that run side by side: the two slowest (they time kernels and replay whole prefix caches,
# about 100 s of the sanitizer stage's CPU; label figures-heavy, which scripts/test.sh leaves out
# there: kernels, prefix caches and trace readers have their own tests and fuzzers under the
# sanitizers) and all the others.
set(kvlab_heavy_figures kernel-overhead,prefix-cache)
add_test(NAME figures.smoke COMMAND $<TARGET_FILE:kvlab> figure all --skip ${kvlab_heavy_figures} --no-progress
                                    --out ${CMAKE_CURRENT_BINARY_DIR}/figures)
set_tests_properties(figures.smoke PROPERTIES LABELS figures TIMEOUT 600 FIXTURES_SETUP figures_smoke)
add_test(NAME figures.smoke_heavy COMMAND $<TARGET_FILE:kvlab> figure ${kvlab_heavy_figures} --no-progress
                                          --out ${CMAKE_CURRENT_BINARY_DIR}/figures)
set_tests_properties(figures.smoke_heavy PROPERTIES LABELS "figures;figures-heavy" TIMEOUT 600
                                                    FIXTURES_SETUP figures_heavy)
# Every number a figure README states after its setup line is in one of its data files (issue 28):
# the figures just made (host and emulated device), the committed results, and the checker itself.
add_test(NAME figures.readme_numbers
         COMMAND python3 ${PROJECT_SOURCE_DIR}/scripts/check_readme_numbers.py ${CMAKE_CURRENT_BINARY_DIR}/figures)
set_tests_properties(figures.readme_numbers PROPERTIES LABELS "figures;figures-heavy"
                                                       FIXTURES_REQUIRED "figures_smoke;figures_heavy")
add_test(NAME figures.readme_numbers_device
         COMMAND python3 ${PROJECT_SOURCE_DIR}/scripts/check_readme_numbers.py ${CMAKE_CURRENT_BINARY_DIR}/figure-device-emulated)
set_tests_properties(figures.readme_numbers_device PROPERTIES LABELS "figures;emulated-e2e" FIXTURES_REQUIRED figures_device)
add_test(NAME results.readme_numbers
         COMMAND python3 ${PROJECT_SOURCE_DIR}/scripts/check_readme_numbers.py ${PROJECT_SOURCE_DIR}/results)
set_tests_properties(results.readme_numbers PROPERTIES LABELS figures)
# The index's headline per figure quotes only that figure's data, at either scale.
add_test(NAME results.readme_index
         COMMAND python3 ${PROJECT_SOURCE_DIR}/scripts/check_readme_numbers.py --index ${PROJECT_SOURCE_DIR}/results/README.md)
set_tests_properties(results.readme_index PROPERTIES LABELS figures)
# docs/schema.md lists every column of every output (compare over every backend family, every
# figure), and nothing that is not written (issue 30).
add_test(NAME cli.schema
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_schema.py $<TARGET_FILE:kvlab>
                 ${CMAKE_CURRENT_BINARY_DIR}/cli-schema ${PROJECT_SOURCE_DIR}/docs/schema.md ${CMAKE_CURRENT_BINARY_DIR}/figures)
set_tests_properties(cli.schema PROPERTIES LABELS "cli;figures-heavy" FIXTURES_REQUIRED "figures_smoke;figures_heavy")
# replay/compare --config run.json rerun a recorded run with the same options and results (issue 30).
add_test(NAME cli.config_rerun
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_config_rerun.py $<TARGET_FILE:kvlab>
                 ${CMAKE_CURRENT_BINARY_DIR}/cli-config-rerun)
set_tests_properties(cli.config_rerun PROPERTIES LABELS cli)
# Every example in README.md and in each command's --help runs (small versions): no error, at most
# 5 % of requests rejected, --verify-kv verifies tokens (issue 30). Release build only (label
# examples; scripts/test.sh leaves it out of the sanitizer runs, whose CLI coverage is the rest).
add_test(NAME cli.examples
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_examples.py $<TARGET_FILE:kvlab> ${PROJECT_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/cli-examples)
set_tests_properties(cli.examples PROPERTIES LABELS "cli;examples" TIMEOUT 900)
# replay --dump-plans: the scheduler's plans, each agreeing with its row of steps.csv (issue 31).
add_test(NAME cli.dump_plans
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_dump_plans.py $<TARGET_FILE:kvlab>
                 ${CMAKE_CURRENT_BINARY_DIR}/cli-dump-plans)
set_tests_properties(cli.dump_plans PROPERTIES LABELS cli)
# compare --tenants: several tenants sharing the KV capacity, static split against elastic pool (issue 32).
add_test(NAME cli.tenants
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_tenants.py $<TARGET_FILE:kvlab>
                 ${CMAKE_CURRENT_BINARY_DIR}/cli-tenants)
set_tests_properties(cli.tenants PROPERTIES LABELS cli PASS_REGULAR_EXPRESSION "check_tenants: ok")
add_test(NAME scripts.check_readme_numbers_self_test
         COMMAND python3 ${PROJECT_SOURCE_DIR}/scripts/check_readme_numbers.py --self-test)
set_tests_properties(scripts.check_readme_numbers_self_test PROPERTIES LABELS scripts)
# The figures that compare against a paper's numbers, one at a time: columns, rows, the clock sources
# line, and that what the README says (relative errors, where the minimum lies) agrees with data.csv.
# Label figure-checks: they rerun figures that figures.smoke already runs, to check their text, so
# the sanitizer stage of scripts/test.sh leaves them out (the same code runs there in figures.smoke).
foreach(name batch-size block-size recompute-vs-swap)
  add_test(NAME figures.${name}
           COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:kvlab> -DOUT=${CMAKE_CURRENT_BINARY_DIR}/figure-${name}
                   -DNAME=${name} -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_figure.cmake)
  set_tests_properties(figures.${name} PROPERTIES LABELS "figures;figure-checks" TIMEOUT 300)
endforeach()
# prefix-cache: every hit rate is its named hits over its named total, and every percentage its
# README states is in data.csv (issue 28).
add_test(NAME figures.prefix-cache
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_prefix_cache.py $<TARGET_FILE:kvlab>
                 ${CMAKE_CURRENT_BINARY_DIR}/figure-prefix-cache)
set_tests_properties(figures.prefix-cache PROPERTIES LABELS "figures;figure-checks" TIMEOUT 300)
add_test(NAME cli.sweep_and_collect
         COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:kvlab> -DOUT=${CMAKE_CURRENT_BINARY_DIR}/cli-sweep
         -DSWEEP=${PROJECT_SOURCE_DIR}/experiments/sweeps/smoke.sweep -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_sweep.cmake)
set_tests_properties(cli.sweep_and_collect PROPERTIES LABELS cli)
# The bad-input matrix of docs/bad-inputs.md: one test per group (cli.bad_inputs.*).
include(${CMAKE_CURRENT_SOURCE_DIR}/cli/bad_inputs.cmake)
# Empty option values (the bad-input table's runner cannot pass an empty argument).
add_test(NAME cli.empty_trace_names COMMAND sh -c
  "\"$0\" replay --trace '' 2>&1 | grep -q -- '--trace names no file' && \"$0\" replay --lengths-from '' 2>&1 | grep -q -- '--lengths-from names no file'"
  $<TARGET_FILE:kvlab>)
set_tests_properties(cli.empty_trace_names PROPERTIES LABELS cli)
# Write failures (a full stdout, /dev/full, an injected full disk in --out): non-zero exit, one line,
# no partial or temporary file (serving/support/atomic_file.hpp).
add_test(NAME cli.disk_full_no_silent_loss
         COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:kvlab> -DOUT=${CMAKE_CURRENT_BINARY_DIR}/cli-disk-full
         -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_disk_full.cmake)
set_tests_properties(cli.disk_full_no_silent_loss PROPERTIES LABELS cli)
# Overlapping, interrupted and killed runs: the --out lock, the completion marker, SIGINT/SIGTERM,
# and a sweep that owns its children (experiments/runs/run_control.hpp).
add_test(NAME cli.run_control COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_run_control.sh $<TARGET_FILE:kvlab>
         ${CMAKE_CURRENT_BINARY_DIR}/cli-run-control)
set_tests_properties(cli.run_control PROPERTIES LABELS cli TIMEOUT 300)
# kvlab calibrate --quick: a complete device model file that replay --device-model really uses.
add_test(NAME cli.calibrate_quick
         COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:kvlab> -DOUT=${CMAKE_CURRENT_BINARY_DIR}/cli-calibrate
         -P ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_calibrate.cmake)
set_tests_properties(cli.calibrate_quick PROPERTIES LABELS cli TIMEOUT 120)
add_test(NAME cli.calibrate_help_has_examples COMMAND $<TARGET_FILE:kvlab> calibrate --help)
set_tests_properties(cli.calibrate_help_has_examples PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "Examples:.*kvlab calibrate --device host --out")
# A run that rejects more than 1 % of its requests says so on stderr, with the reason and the
# option that changes it (issue 30: a README example once rejected all its requests silently).
add_test(NAME cli.rejections_are_reported COMMAND sh -c
  "\"$0\" replay --requests 20 --model yi-6b --max-seq-len 64 --prompt-len fixed:100 --output-len fixed:5 2>&1 >/dev/null | grep -q 'warning: paged-b16: 20 of 20 requests (100.0 %) were rejected, 20 of them: longer than max_seq_len 64; change it with --max-seq-len' && ! \"$0\" replay --requests 20 --model yi-6b 2>&1 >/dev/null | grep -q warning"
  $<TARGET_FILE:kvlab>)
set_tests_properties(cli.rejections_are_reported PROPERTIES LABELS cli)
# The README's emulated example verifies KV and rejects nothing (it once rejected all 8 requests).
add_test(NAME cli.readme_emulated_example_verifies COMMAND sh -c
  "out=$(\"$0\" replay --backend vmm-2m --device emulated --execute --verify-kv --execute-layers 1 --model yi-6b --capacity-gib 0.25 --max-seq-len 256 --requests 8 --prompt-len uniform:8:40 --output-len uniform:2:10 2>&1) && echo \"$out\" | grep -Eq '0 rejected, [1-9][0-9]* token reads verified, 0 KV mismatches' && ! echo \"$out\" | grep -q warning && grep -q -- '--requests 8 --prompt-len uniform:8:40 --output-len uniform:2:10' $1"
  $<TARGET_FILE:kvlab> ${PROJECT_SOURCE_DIR}/README.md)
set_tests_properties(cli.readme_emulated_example_verifies PROPERTIES LABELS "cli;emulated-e2e")
# Every subcommand answers --help with exit 0 (issue 30: `models --help` failed), and the sweep file
# sweep --help cites exists and runs.
add_test(NAME cli.every_help_works COMMAND sh -c
  "for c in replay compare sweep collect figure calibrate models devices version; do \"$0\" $c --help >/dev/null || { echo \"kvlab $c --help failed\"; exit 1; }; done; \"$0\" sweep --help | grep -q 'experiments/sweeps/block-size.sweep' && test -f \"$1/experiments/sweeps/block-size.sweep\" && \"$0\" sweep \"$1/experiments/sweeps/block-size.sweep\" --dry-run >/dev/null"
  $<TARGET_FILE:kvlab> ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.every_help_works PROPERTIES LABELS cli)
# kvlab figure --format: each format named is written (issue 30: PNG only before), and the smoke
# scale is marked on the plot (checked in the SVG's text).
add_test(NAME figures.formats COMMAND sh -c
  "rm -rf \"$1\" && \"$0\" figure sharing --format png,pdf,svg --no-progress --out \"$1\" >/dev/null && test -s \"$1/sharing/sharing.png\" && test -s \"$1/sharing/sharing.pdf\" && grep -q 'SMOKE SCALE' \"$1/sharing/sharing.svg\""
  $<TARGET_FILE:kvlab> ${CMAKE_CURRENT_BINARY_DIR}/figure-formats)
set_tests_properties(figures.formats PROPERTIES LABELS figures)
# Every benchmark JSON names its host (CPU model, L3, THP mode, the host kernel's prefetch distance,
# measured read bandwidth), so results from different hosts are never compared as one.
if(TARGET kvlab_bench_paged)
  add_test(NAME cli.bench_host_context
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_bench_context.py
                   $<TARGET_FILE:kvlab_bench_paged> BM_BlockPoolAllocateFree/1024
                   ${CMAKE_CURRENT_BINARY_DIR}/bench-context.json memory_read_bandwidth_bytes_per_s)
  set_tests_properties(cli.bench_host_context PROPERTIES LABELS cli TIMEOUT 120)
endif()
# The attention benchmark's JSON also carries the decode's arithmetic ceiling beside the bandwidth
# (docs/kernels.md, "Roofline"); the ceiling benchmark itself is the quick one to run.
if(TARGET kvlab_bench_attention)
  add_test(NAME cli.bench_attention_ceilings
           COMMAND Python3::Interpreter ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_bench_context.py
                   $<TARGET_FILE:kvlab_bench_attention> BM_DecodeArithmeticCeiling
                   ${CMAKE_CURRENT_BINARY_DIR}/bench-attention-context.json memory_read_bandwidth_bytes_per_s
                   memory_read_bandwidth_one_thread_bytes_per_s decode_arithmetic_ceiling_bytes_per_s
                   decode_arithmetic_ceiling_one_thread_bytes_per_s)
  set_tests_properties(cli.bench_attention_ceilings PROPERTIES LABELS cli TIMEOUT 120)
endif()

# The longest tests start first (COST: their seconds in scripts/test.sh's stages on 2 cores, the
# larger of release and sanitizer): a clean clone has no CTestCostData.txt, and ctest would start
# them in definition order, leaving one or two to run alone at the end of a stage.
set_tests_properties(figures.smoke PROPERTIES COST 170)
set_tests_properties(cli.device_emulated PROPERTIES COST 135)
set_tests_properties(cli.run_control PROPERTIES COST 68)
set_tests_properties(cli.examples PROPERTIES COST 64)
set_tests_properties(figures.device_emulated PROPERTIES COST 30)
# A replay that executes on the host says what pages its KV pools are on (issue 34).
add_test(NAME cli.execute_reports_host_pages
         COMMAND $<TARGET_FILE:kvlab> replay --backend paged-16 --execute --execute-layers 1 --model yi-6b
                 --capacity-gib 0.05 --requests 2 --prompt-len fixed:16 --output-len fixed:4 --no-progress)
set_tests_properties(cli.execute_reports_host_pages PROPERTIES LABELS cli
  PASS_REGULAR_EXPRESSION "host memory: host KV pools (of 2 MiB and more on 2 MiB pages|on 4 KiB pages) \\(transparent huge pages: [a-z]+; for shared memory, vmm's host pages: [a-z_+]+\\)")
