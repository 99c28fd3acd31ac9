# cmake -DCTEST=... -DBUILD_DIR=... -P check_tiers.cmake
# Every test CTest lists has exactly one tier label: unit, ptrace or slow (other labels, such
# as `fault`, may stand beside it). None has no tier, and the tiers' counts add up to the
# whole: a test with two tiers would be counted twice.
function(count_tests var)
  execute_process(COMMAND ${CTEST} --test-dir ${BUILD_DIR} -N ${ARGN}
                  OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "Total Tests: ([0-9]+)")
    message(FATAL_ERROR "ctest -N ${ARGN} failed (${rc}): ${out}")
  endif()
  set(${var} ${CMAKE_MATCH_1} PARENT_SCOPE)
  set(${var}_list "${out}" PARENT_SCOPE)
endfunction()

count_tests(all)
count_tests(unit -L "^unit$")
count_tests(ptrace -L "^ptrace$")
count_tests(slow -L "^slow$")
count_tests(none -LE "^(unit|ptrace|slow)$")
math(EXPR sum "${unit} + ${ptrace} + ${slow}")
message("${all} tests: ${unit} unit, ${ptrace} ptrace, ${slow} slow")
if(NOT none EQUAL 0)
  message(FATAL_ERROR "${none} tests without a tier:\n${none_list}")
endif()
if(NOT sum EQUAL all)
  message(FATAL_ERROR "the tiers count ${sum} tests of ${all}: some test has more than one")
endif()
