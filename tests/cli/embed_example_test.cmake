# Installs the built gmm-gen into PREFIX, then configures, builds and runs examples/embed
# against it (find_package(gmmgen) + gmmgen_add_kernels). Fails on any step's failure.
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed (${rc}): ${ARGN}")
  endif()
endfunction()
file(REMOVE_RECURSE "${PREFIX}" "${EXAMPLE_BUILD}")
step(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${PREFIX}")
step(${CMAKE_COMMAND} -S "${EXAMPLE}" -B "${EXAMPLE_BUILD}" -G "${GENERATOR}"
     "-DCMAKE_PREFIX_PATH=${PREFIX}")
step(${CMAKE_COMMAND} --build "${EXAMPLE_BUILD}")
step("${EXAMPLE_BUILD}/embed_example")
