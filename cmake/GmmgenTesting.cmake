# Labels of gmm-gen's own tests (not installed). Every ctest entry carries two kinds of label:
#   - its subject: the test folder it comes from (unit, kernels, runtime, cli, pallas, python,
#     consumers, examples, fuzz, docs);
#   - the tiers that run it. The tiers nest: a `smoke` test also carries `ci` and `full`, a `ci`
#     test also `full`, a `full` test only `full`. So `ctest -L '^ci$'` runs the ci tier, and
#     `ctest -L '^full$'` runs everything but the tests of tier `ci_only` (label `ci`): quick
#     subsets of a check whose every case the full tier runs as other tests.
# A test's tier is the first of its tier labels; docs/contributing.md ("Test tiers") says what
# goes in each.
include_guard(GLOBAL)
include(GoogleTest)

set(_GMMGEN_TEST_SUBJECTS unit kernels runtime cli pallas python consumers examples fuzz docs)
set(_GMMGEN_TIER_LABELS_smoke smoke ci full)
set(_GMMGEN_TIER_LABELS_ci ci full)
set(_GMMGEN_TIER_LABELS_full full)
set(_GMMGEN_TIER_LABELS_ci_only ci)

# Flags added to those of the kernels the tests compile at run time (GMMGEN_CXXFLAGS): .ci/test
# gives its Release leg's optimization, -O2 below the full tier (a quarter less compile time than
# the runtime's -O3 on average; the same contraction of products into FMAs), -O3 in it.
set(GMMGEN_TEST_JIT_FLAGS "" CACHE STRING "Flags added to the tests' run-time kernel compiles")
# GMMGEN_CXXFLAGS of the tests (tests/CMakeLists.txt: why the canary).
string(STRIP "-DGMMGEN_SCRATCH_CANARY ${GMMGEN_TEST_JIT_FLAGS}" GMMGEN_TEST_CXXFLAGS)

# The environment of the tests that run JAX in TPU interpret mode or on small arrays: most of
# their time is XLA compiling (interpret mode compiles per shape), so XLA compiles without its
# costly optimizations (~15% less test time). Not for a test whose time is XLA running the
# kernels (Pallas's generic interpreter).
set(GMMGEN_TEST_JAX_ENV
    "XLA_FLAGS=--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true")

# gmmgen_test_labels(<tier> <subject> <label-var>): the labels of a test of this tier and subject.
function(gmmgen_test_labels tier subject out)
  if(NOT DEFINED _GMMGEN_TIER_LABELS_${tier})
    message(FATAL_ERROR "gmm-gen tests: tier '${tier}' is not smoke, ci, full or ci_only")
  endif()
  if(NOT subject IN_LIST _GMMGEN_TEST_SUBJECTS)
    message(FATAL_ERROR "gmm-gen tests: subject '${subject}' is not one of ${_GMMGEN_TEST_SUBJECTS}")
  endif()
  set(${out} ${subject} ${_GMMGEN_TIER_LABELS_${tier}} PARENT_SCOPE)
endfunction()

# gmmgen_label_tests(TIER <tier> SUBJECT <subject> TESTS <name>...): labels tests made by
# add_test().
function(gmmgen_label_tests)
  cmake_parse_arguments(ARG "" "TIER;SUBJECT" "TESTS" ${ARGN})
  gmmgen_test_labels(${ARG_TIER} ${ARG_SUBJECT} labels)
  set_tests_properties(${ARG_TESTS} PROPERTIES LABELS "${labels}")
endfunction()

# gmmgen_add_gtests(<executable> SUBJECT <subject> [SMOKE <pattern>...] [FULL <pattern>...]
#                   [TIMEOUT <seconds>] [ENVIRONMENT <NAME=value>...])
# One ctest entry per test of a GoogleTest executable, labelled: tests matching a SMOKE pattern
# are tier smoke, those matching a FULL pattern tier full, the rest tier ci. Patterns are
# GoogleTest filter patterns (`*` and `?`) over the full test name, e.g. `Suite.Name`,
# `Instance/Suite.Name/*`; a test matching both is tier full.
# (The labels and the environment, lists, are set by a file ctest reads after the discovered
# tests: gtest_discover_tests' PROPERTIES would split them into separate values.)
function(gmmgen_add_gtests exe)
  cmake_parse_arguments(ARG "" "SUBJECT;TIMEOUT" "SMOKE;FULL;ENVIRONMENT" ${ARGN})
  if(NOT ARG_SUBJECT)
    message(FATAL_ERROR "gmmgen_add_gtests(${exe}): SUBJECT is required")
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  list(JOIN ARG_SMOKE ":" smoke)
  list(JOIN ARG_FULL ":" full)
  set(ci "*")
  if(smoke OR full)
    set(ci "*-${smoke}")
    if(smoke AND full)
      string(APPEND ci ":")
    endif()
    string(APPEND ci "${full}")
  endif()
  if(smoke AND full)
    string(APPEND smoke "-${full}")
  endif()
  set(script "")
  foreach(tier smoke ci full)
    if(NOT ${tier})
      continue()
    endif()
    gmmgen_test_labels(${tier} ${ARG_SUBJECT} labels)
    set(list_var "gmmgen_${exe}_${tier}_tests")
    gtest_discover_tests(${exe} TEST_FILTER "${${tier}}" DISCOVERY_TIMEOUT 60
                         TEST_LIST ${list_var} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
    string(APPEND script "if(${list_var})\n  set_tests_properties(\${${list_var}} PROPERTIES\n"
                         "    LABELS [==[${labels}]==] ENVIRONMENT [==[${ARG_ENVIRONMENT}]==])\n"
                         "endif()\n")
  endforeach()
  set(file "${CMAKE_CURRENT_BINARY_DIR}/${exe}_labels.cmake")
  file(WRITE "${file}" "${script}")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${file}")
endfunction()
