# One step of the consumer-project tests (tests/consumers/CMakeLists.txt). Usage:
#   cmake -DSTEP=<step> -DBUILD_DIR=<gmm-gen build> -DWORK=<scratch> -DSOURCE=<tests/consumers>
#         -DGMMGEN_SOURCE_DIR=<gmm-gen source> -DGENERATOR=<generator>
#         -DGMMGEN_EXECUTABLE=<built gmm-gen> -P consumer_test.cmake
# Fails on the first failing command, printing its output.
cmake_minimum_required(VERSION 3.22)

# Runs a command; its output goes to the log and to <out_var> if given.
function(step)
  cmake_parse_arguments(ARG "" "OUTPUT" "" ${ARGN})
  execute_process(COMMAND ${ARG_UNPARSED_ARGUMENTS} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE out)
  message("$ ${ARG_UNPARSED_ARGUMENTS}\n${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc})")
  endif()
  # gmmgen_add_kernels adds each kernel's ISA flags: an isa=native kernel built without them
  # would say so (#warning) and run generic scalar code.
  if(out MATCHES "#warning \"gmm-gen")
    message(FATAL_ERROR "a kernel was compiled without its ISA flags")
  endif()
  if(ARG_OUTPUT)
    set(${ARG_OUTPUT} "${out}" PARENT_SCOPE)
  endif()
endfunction()

# A fresh copy of consumer projects (so that touching their spec files changes nothing in the
# source tree), and a fresh build folder.
function(fresh_copy build)
  foreach(project IN LISTS ARGN)
    file(REMOVE_RECURSE "${WORK}/src/${project}")
    file(COPY "${SOURCE}/${project}" DESTINATION "${WORK}/src")
  endforeach()
  file(REMOVE_RECURSE "${WORK}/${build}")
endfunction()

set(prefix "${WORK}/prefix")
if(STEP STREQUAL "Install")
  # One install serves every find_package test.
  file(REMOVE_RECURSE "${prefix}")
  step(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")

elseif(STEP STREQUAL "CFindPackageInstalled")
  # C only, against the installed package, with the libraries' dependencies made unfindable:
  # a project that only emits and compiles kernels needs none of them.
  fresh_copy(build-c c)
  step(${CMAKE_COMMAND} -S "${WORK}/src/c" -B "${WORK}/build-c" -G "${GENERATOR}"
       -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}"
       -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON
       -DCMAKE_DISABLE_FIND_PACKAGE_Threads=ON)
  step(${CMAKE_COMMAND} --build "${WORK}/build-c" OUTPUT out)
  # One translation unit per spec entry (3) and the table, each compiled on its own.
  string(REGEX MATCHALL "Building CXX object[^\n]*c_consumer_kernels_[0-9a-z]+\\.cpp" units "${out}")
  list(LENGTH units count)
  if(NOT count EQUAL 4)
    message(FATAL_ERROR "expected 4 kernel translation units compiled, saw ${count}: ${units}")
  endif()
  step("${WORK}/build-c/c_consumer")

elseif(STEP STREQUAL "SingleUnitNeedsOneSetOfIsaFlags")
  # SINGLE_UNIT on the C consumer's bundle, which mixes isa=native (-march=native) with a
  # generic kernel (no flags): a configure error naming the entry and both families.
  # A copy of its own: ctest may run Consumers.TouchedSpecRecompilesNothing, which touches and
  # builds the shared copy in src/, at the same time.
  file(REMOVE_RECURSE "${WORK}/src-single" "${WORK}/build-c-single")
  file(COPY "${SOURCE}/c" DESTINATION "${WORK}/src-single")
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${WORK}/src-single/c" -B "${WORK}/build-c-single"
                          -G "${GENERATOR}" "-DCMAKE_PREFIX_PATH=${prefix}"
                          -DC_CONSUMER_SINGLE_UNIT=ON
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  string(REGEX REPLACE "[ \n]+" " " flat "${out}")  # CMake wraps its messages
  if(rc EQUAL 0 OR NOT flat MATCHES "SINGLE_UNIT needs one set of ISA flags for every kernel, but entry 2 \\(0-based\\) is isa=generic and an earlier one isa=native")
    message(FATAL_ERROR "SINGLE_UNIT accepted a bundle of mixed ISA flags, or said so unclearly")
  endif()

elseif(STEP STREQUAL "TouchedSpecRecompilesNothing")
  # After the build above: a spec file touched but not changed re-runs CMake and emit, and emit
  # rewrites nothing, so nothing is compiled or linked; the build after that has no work at all.
  file(TOUCH "${WORK}/src/c/kernels.json")
  step(${CMAKE_COMMAND} --build "${WORK}/build-c" OUTPUT out)
  if(out MATCHES "Building|Linking" OR NOT out MATCHES "gmm-gen: emitting kernel bundle")
    message(FATAL_ERROR "a touched spec file rebuilt something (or did not re-run emit)")
  endif()
  step(${CMAKE_COMMAND} --build "${WORK}/build-c" OUTPUT out)
  if(GENERATOR STREQUAL "Ninja" AND NOT out MATCHES "no work to do")
    message(FATAL_ERROR "the build after a touched spec file still had work to do")
  endif()
  step("${WORK}/build-c/c_consumer")

elseif(STEP STREQUAL "CxxFindPackageBuildTree")
  # C++ at the compiler's default standard, against the build folder as a package.
  fresh_copy(build-cxx cxx)
  step(${CMAKE_COMMAND} -S "${WORK}/src/cxx" -B "${WORK}/build-cxx" -G "${GENERATOR}"
       -DCMAKE_BUILD_TYPE=Release "-Dgmmgen_DIR=${BUILD_DIR}")
  step(${CMAKE_COMMAND} --build "${WORK}/build-cxx")
  step("${WORK}/build-cxx/cxx_consumer")

elseif(STEP STREQUAL "AddSubdirectory")
  # No build type: gmm-gen as a subproject must not set one for the parent.
  fresh_copy(build-subdir c cxx subdir)
  step(${CMAKE_COMMAND} -S "${WORK}/src/subdir" -B "${WORK}/build-subdir" -G "${GENERATOR}"
       "-DGMMGEN_SOURCE_DIR=${GMMGEN_SOURCE_DIR}" "-DGMMGEN_EXECUTABLE=${GMMGEN_EXECUTABLE}"
       -DEXPECTED_BUILD_TYPE=)
  step(${CMAKE_COMMAND} --build "${WORK}/build-subdir")
  step("${WORK}/build-subdir/c/c_consumer")
  step("${WORK}/build-subdir/cxx/cxx_consumer")

else()
  message(FATAL_ERROR "unknown STEP '${STEP}'")
endif()
