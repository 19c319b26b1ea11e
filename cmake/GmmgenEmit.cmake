# gmmgen_add_kernels(<target> SPEC_FILE <file.json> BUNDLE <name>
#                    [OUTPUT_DIR <dir>] [COMPILE_OPTIONS <flags>...])
#
# Runs `gmm-gen emit --bundle` at build time for a JSON spec file and compiles the kernels into
# <target>. The bundle header <name>.h (<OUTPUT_DIR>/cpp, on the target's include path) declares
# every kernel and
# the table <name>_kernels[<name>_kernel_count] of their entry points. The bundle compiles with
# the target's flags plus COMPILE_OPTIONS (e.g. -march=native); kernels whose spec names an isa
# (avx2, avx512) stop the build with #error if those flags do not enable it.
# Works after find_package(gmmgen) and after add_subdirectory(gmm-gen).
function(gmmgen_add_kernels target)
  cmake_parse_arguments(ARG "" "SPEC_FILE;BUNDLE;OUTPUT_DIR" "COMPILE_OPTIONS" ${ARGN})
  if(NOT ARG_SPEC_FILE OR NOT ARG_BUNDLE)
    message(FATAL_ERROR "gmmgen_add_kernels(${target}): SPEC_FILE and BUNDLE are required")
  endif()
  get_filename_component(spec_file "${ARG_SPEC_FILE}" ABSOLUTE)
  if(NOT ARG_OUTPUT_DIR)
    set(ARG_OUTPUT_DIR "${CMAKE_CURRENT_BINARY_DIR}/gmmgen_${ARG_BUNDLE}")
  endif()
  if(TARGET gmmgen::gmm-gen)
    set(tool gmmgen::gmm-gen)
  else()
    set(tool gmm-gen)
  endif()
  set(out "${ARG_OUTPUT_DIR}")
  set(src "${out}/cpp")
  add_custom_command(
    OUTPUT "${src}/${ARG_BUNDLE}.cpp" "${src}/${ARG_BUNDLE}.h" "${out}/manifest.json"
    COMMAND ${tool} emit --spec-file "${spec_file}" --out "${out}" --bundle ${ARG_BUNDLE}
    DEPENDS "${spec_file}" ${tool}
    COMMENT "gmm-gen: emitting kernel bundle ${ARG_BUNDLE} from ${ARG_SPEC_FILE}"
    VERBATIM)
  target_sources(${target} PRIVATE "${src}/${ARG_BUNDLE}.cpp")
  target_include_directories(${target} PUBLIC "$<BUILD_INTERFACE:${src}>")
  if(ARG_COMPILE_OPTIONS)
    set_source_files_properties("${src}/${ARG_BUNDLE}.cpp" PROPERTIES COMPILE_OPTIONS "${ARG_COMPILE_OPTIONS}")
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${spec_file}")
endfunction()
