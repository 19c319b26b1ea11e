# gmmgen_add_kernels([<target>] SPEC_FILE <file.json> [BUNDLE <name>] [LIBRARY <lib>]
#                    [OUT_VAR <var>] [OUTPUT_DIR <dir>] [SINGLE_UNIT]
#                    [COMPILE_OPTIONS <flags>...])
# (also spelled gmmgen_add_kernels(TARGET <target> SPECS <file.json> ...))
#
# Runs `gmm-gen emit --bundle <name>` at build time for a JSON spec file and compiles the kernels:
# one translation unit per spec entry (<name>_<i>.cpp, so Ninja compiles kernels in parallel)
# plus <name>_table.cpp, the table <name>_kernels[<name>_kernel_count] of their entry points.
# The header <name>.h declares every kernel, the aliases of the spec file and the table.
#   <target>     add the sources to this existing target (the header folder goes on its PUBLIC
#                include path);
#   LIBRARY      create a STATIC library <lib> holding them instead (header folder PUBLIC): link it;
#   OUT_VAR      set <var> to the list of sources (table first), to add them yourself.
# At least one of the three is needed. BUNDLE defaults to <lib> or <target> made a C identifier.
# SINGLE_UNIT compiles the whole bundle as one translation unit (<name>.cpp) instead: the headers
# are read once, so the bundle takes about half the compile time in all, on one core; every C++
# entry must then have the same ISA flags (all isa=native, or all explicit families).
# Each translation unit gets COMPILE_OPTIONS plus the flags of its kernel's ISA family:
# -march=native for isa=native (the default), none for an explicit family (its code carries
# target attributes). The entry count is read here at configure time (CMake re-runs when the spec
# file changes); emit rewrites only files whose content changed and Ninja restats them, so a
# touched but unchanged spec file recompiles nothing. C-only projects work: C++ is enabled for
# the caller's directory. GMMGEN_EXECUTABLE, if set, is the gmm-gen that runs instead of the
# package's (e.g. a prebuilt one when gmm-gen is added with add_subdirectory).
# Works after find_package(gmmgen) and after add_subdirectory(<gmm-gen source>).
include_guard(GLOBAL)

# The isa (and target) an entry of a spec file names: spec text "k=..,isa=avx2", a JSON spec
# object, or {"spec": <text or object>, "alias": ...}. Best effort: a spec it misreads is still
# emitted as written, only its flags would be wrong; emit reports invalid specs. Called from
# _gmmgen_add_kernels, whose _GMMGEN_ISA_DEFAULT it reads.
function(_gmmgen_entry_isa list index out_isa out_target)
  set(isa "${_GMMGEN_ISA_DEFAULT}")
  set(target "cpp")
  string(JSON type TYPE "${list}" ${index})
  set(text "")
  set(object "")
  if(type STREQUAL "STRING")
    string(JSON text GET "${list}" ${index})
  elseif(type STREQUAL "OBJECT")
    string(JSON object GET "${list}" ${index})
    string(JSON spec_type ERROR_VARIABLE missing TYPE "${object}" spec)
    if(NOT missing AND spec_type STREQUAL "STRING")
      string(JSON text GET "${object}" spec)
      set(object "")
    elseif(NOT missing)
      string(JSON object GET "${object}" spec)
    endif()
  endif()
  foreach(key isa target)
    if(object)
      string(JSON value ERROR_VARIABLE missing GET "${object}" ${key})
      if(NOT missing)
        set(${key} "${value}")
      endif()
    elseif(text MATCHES "(^|,) *${key}=([^,]*)")
      string(STRIP "${CMAKE_MATCH_2}" value)
      set(${key} "${value}")
    endif()
  endforeach()
  set(${out_isa} "${isa}" PARENT_SCOPE)
  set(${out_target} "${target}" PARENT_SCOPE)
endfunction()

function(_gmmgen_add_kernels)
  # What isa_flags() in generator/src/heuristics/cpu_x86.cpp returns per ISA family (the unit test
  # Emit.CMakeIsaFlagsMatchTheGenerator compares), and the isa field's default. Set here, not at
  # file scope: after add_subdirectory(gmm-gen), variables of gmm-gen's folder are not the caller's.
  set(_GMMGEN_ISA_FLAGS_native "-march=native")
  set(_GMMGEN_ISA_DEFAULT "native")
  set(keywords TARGET SPEC_FILE SPECS BUNDLE LIBRARY OUT_VAR OUTPUT_DIR SINGLE_UNIT COMPILE_OPTIONS)
  set(first 0)
  set(target "")
  if(ARGC GREATER 0)
    list(FIND keywords "${ARGV0}" keyword)
    if(keyword EQUAL -1)
      set(target "${ARGV0}")
      set(first 1)
    endif()
  endif()
  cmake_parse_arguments(PARSE_ARGV ${first} ARG "SINGLE_UNIT"
                        "TARGET;SPEC_FILE;SPECS;BUNDLE;LIBRARY;OUT_VAR;OUTPUT_DIR" "COMPILE_OPTIONS")
  set(fn "gmmgen_add_kernels(${target}${ARG_TARGET})")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${fn}: unexpected arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(ARG_TARGET)
    if(target)
      message(FATAL_ERROR "${fn}: name the target once (first argument or TARGET)")
    endif()
    set(target "${ARG_TARGET}")
  endif()
  if(ARG_SPECS)
    set(ARG_SPEC_FILE "${ARG_SPECS}")
  endif()
  if(NOT ARG_SPEC_FILE)
    message(FATAL_ERROR "${fn}: SPEC_FILE <file.json> is required")
  endif()
  if(NOT target AND NOT ARG_LIBRARY AND NOT ARG_OUT_VAR)
    message(FATAL_ERROR "${fn}: give a target, LIBRARY <name> or OUT_VAR <variable>: "
                        "something to put the kernels in")
  endif()
  if(target AND NOT TARGET ${target})
    message(FATAL_ERROR "${fn}: ${target} is not a target; create it first or use LIBRARY")
  endif()
  if(ARG_LIBRARY AND TARGET ${ARG_LIBRARY})
    message(FATAL_ERROR "${fn}: LIBRARY ${ARG_LIBRARY} already exists; "
                        "pass it as the target to add the kernels to it")
  endif()
  set(bundle "${ARG_BUNDLE}")
  if(NOT bundle)
    if(ARG_LIBRARY)
      string(MAKE_C_IDENTIFIER "${ARG_LIBRARY}" bundle)
    elseif(target)
      string(MAKE_C_IDENTIFIER "${target}" bundle)
    else()
      message(FATAL_ERROR "${fn}: BUNDLE <name> is required with OUT_VAR alone")
    endif()
  endif()

  # The entry count (and each entry's ISA family) decide the output files, so the spec file is
  # read now; errors in the specs themselves are emit's to report, at build time.
  get_filename_component(spec_file "${ARG_SPEC_FILE}" ABSOLUTE)
  if(NOT EXISTS "${spec_file}")
    message(FATAL_ERROR "${fn}: SPEC_FILE ${spec_file} does not exist")
  endif()
  file(READ "${spec_file}" json)
  string(JSON type ERROR_VARIABLE error TYPE "${json}")
  if(NOT error AND type STREQUAL "OBJECT")
    string(JSON json ERROR_VARIABLE error GET "${json}" kernels)
    if(NOT error)
      string(JSON type TYPE "${json}")
    endif()
  endif()
  if(error OR NOT type STREQUAL "ARRAY")
    message(FATAL_ERROR "${fn}: ${spec_file} is not a spec file (a JSON array of specs or "
                        "{\"kernels\": [...]}) ${error}")
  endif()
  string(JSON count LENGTH "${json}")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${spec_file}")

  if(ARG_OUTPUT_DIR)
    get_filename_component(out "${ARG_OUTPUT_DIR}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  else()
    set(out "${CMAKE_CURRENT_BINARY_DIR}/gmmgen_${bundle}")
  endif()
  set(src "${out}/cpp")
  set(sources "${src}/${bundle}_table.cpp")
  set_source_files_properties("${src}/${bundle}_table.cpp" PROPERTIES
                              COMPILE_OPTIONS "${ARG_COMPILE_OPTIONS}")
  set(members "")
  set(single_flags "")
  if(count GREATER 0)
    math(EXPR last "${count} - 1")
    foreach(i RANGE ${last})
      _gmmgen_entry_isa("${json}" ${i} isa entry_target)
      set(flags ${ARG_COMPILE_OPTIONS})
      if(entry_target STREQUAL "cpp" AND NOT MSVC)
        list(APPEND flags ${_GMMGEN_ISA_FLAGS_${isa}})
        if(ARG_SINGLE_UNIT AND DEFINED first_cpp_isa AND
           NOT "${_GMMGEN_ISA_FLAGS_${isa}}" STREQUAL "${_GMMGEN_ISA_FLAGS_${first_cpp_isa}}")
          message(FATAL_ERROR "${fn}: SINGLE_UNIT needs one set of ISA flags for every kernel, "
                              "but entry ${i} (0-based) is isa=${isa} and an earlier one "
                              "isa=${first_cpp_isa}")
        endif()
        if(NOT DEFINED first_cpp_isa)
          set(first_cpp_isa "${isa}")
          set(single_flags ${flags})
        endif()
      endif()
      set(unit "${src}/${bundle}_${i}.cpp")
      list(APPEND members "${unit}")
      set_source_files_properties("${unit}" PROPERTIES COMPILE_OPTIONS "${flags}")
    endforeach()
  endif()
  if(ARG_SINGLE_UNIT)
    set(sources "${src}/${bundle}.cpp")
    if(NOT single_flags)
      set(single_flags ${ARG_COMPILE_OPTIONS})
    endif()
    set_source_files_properties("${src}/${bundle}.cpp" PROPERTIES
                                COMPILE_OPTIONS "${single_flags}")
  else()
    list(APPEND sources ${members})
  endif()

  if(GMMGEN_EXECUTABLE)
    set(tool "${GMMGEN_EXECUTABLE}")
  elseif(TARGET gmmgen::gmm-gen)
    set(tool gmmgen::gmm-gen)
  else()
    find_program(GMMGEN_EXECUTABLE gmm-gen)
    if(NOT GMMGEN_EXECUTABLE)
      message(FATAL_ERROR "${fn}: no gmm-gen: find_package(gmmgen), add_subdirectory(<gmm-gen>) "
                          "or set GMMGEN_EXECUTABLE")
    endif()
    set(tool "${GMMGEN_EXECUTABLE}")
  endif()
  add_custom_command(
    OUTPUT "${src}/${bundle}_table.cpp" ${members} "${src}/${bundle}.h" "${src}/${bundle}.cpp"
           "${src}/gmmgen/kernel_abi.h" "${out}/manifest.json"
    COMMAND ${tool} emit --spec-file "${spec_file}" --out "${out}" --bundle ${bundle}
    DEPENDS "${spec_file}" ${tool}
    COMMENT "gmm-gen: emitting kernel bundle ${bundle} from ${ARG_SPEC_FILE}"
    VERBATIM)

  if(ARG_LIBRARY)
    add_library(${ARG_LIBRARY} STATIC ${sources})
    target_include_directories(${ARG_LIBRARY} PUBLIC "$<BUILD_INTERFACE:${src}>")
    target_compile_features(${ARG_LIBRARY} PRIVATE cxx_std_17)
  endif()
  if(target)
    target_sources(${target} PRIVATE ${sources})
    target_include_directories(${target} PUBLIC "$<BUILD_INTERFACE:${src}>")
    target_compile_features(${target} PRIVATE cxx_std_17)
  endif()
  if(ARG_OUT_VAR)
    set(${ARG_OUT_VAR} ${sources} PARENT_SCOPE)
  endif()
endfunction()

# A macro, so that C++ can be enabled in the caller's directory (enable_language() sets variables
# of the scope it runs in): the kernels are C++ even when the project is C only.
macro(gmmgen_add_kernels)
  if(NOT CMAKE_CXX_COMPILER_LOADED)
    if(CMAKE_CURRENT_FUNCTION)
      message(FATAL_ERROR "gmmgen_add_kernels: the kernels are C++ and C++ is not enabled here; "
                          "add CXX to project(... LANGUAGES ...) or call enable_language(CXX) "
                          "(it cannot be enabled from inside the function "
                          "${CMAKE_CURRENT_FUNCTION})")
    endif()
    enable_language(CXX)
  endif()
  _gmmgen_add_kernels(${ARGV})
endmacro()
