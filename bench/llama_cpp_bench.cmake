# llama_cpp_bench (bench/llama_cpp_bench.cpp): llama.cpp's CPU speed and greedy tokens without node.
# It links the prebuilt llama.cpp libraries that node-llama-cpp 3.21.1 ships (installed by
# scripts/setup.sh into tools/peer/node_modules), so it runs exactly the binaries the node peer runs.
# Nothing of llama.cpp is copied into this repository:
#   - the headers (include/, ggml/include/) are extracted at configure time from the package's
#     git bundle (llama/gitRelease.bundle: the source of the prebuilt binaries, commit 80fb11a);
#   - the shared libraries are copied from the package's bins folder into <build>/llama-peer/,
#     beside the program, whose RPATH is $ORIGIN. That folder is self-contained: copy it to any
#     x86-64 Linux machine (no node needed) and run it there (docs/peer.md).
# When the package is missing the target is skipped with a STATUS message; the ctest
# `peer_llama_cpp_bench_goldens` then fails (tests/CMakeLists.txt), it does not skip.
set(NITRO_LLAMA_PEER_PKG_DIR "${CMAKE_SOURCE_DIR}/tools/peer/node_modules" CACHE PATH
    "node_modules folder that holds node-llama-cpp and @node-llama-cpp/linux-x64 (scripts/setup.sh)")
set(_lp_bundle "${NITRO_LLAMA_PEER_PKG_DIR}/node-llama-cpp/llama/gitRelease.bundle")
set(_lp_bins "${NITRO_LLAMA_PEER_PKG_DIR}/@node-llama-cpp/linux-x64/bins/linux-x64")
set(NITRO_LLAMA_CPP_BENCH_DIR "${CMAKE_BINARY_DIR}/llama-peer")   # program + libraries
set(NITRO_LLAMA_CPP_BENCH_BUILT OFF)

file(GLOB _lp_llama "${_lp_bins}/libllama.v*.so")
file(GLOB _lp_ggml "${_lp_bins}/libggml.v*.so")
file(GLOB _lp_cpu "${_lp_bins}/libggml-cpu-*.so")
find_package(Git QUIET)
if(NOT EXISTS "${_lp_bundle}" OR NOT _lp_llama OR NOT _lp_ggml OR NOT EXISTS "${_lp_bins}/libggml-base.so" OR NOT _lp_cpu)
  message(STATUS "llama_cpp_bench: skipped (node-llama-cpp's prebuilt llama.cpp not found under "
                 "${NITRO_LLAMA_PEER_PKG_DIR}; run scripts/setup.sh)")
elseif(NOT GIT_FOUND)
  message(STATUS "llama_cpp_bench: skipped (git is needed to read the llama.cpp headers from ${_lp_bundle})")
else()
  # Headers: extracted once per bundle (keyed by its sha256), into <build>/llama-peer-src/.
  set(_lp_src "${CMAKE_BINARY_DIR}/llama-peer-src")
  file(SHA256 "${_lp_bundle}" _lp_bundle_sha)
  set(_lp_stamp "${_lp_src}/bundle.sha256")
  set(_lp_have "")
  if(EXISTS "${_lp_stamp}")
    file(READ "${_lp_stamp}" _lp_have)
  endif()
  if(NOT _lp_have STREQUAL _lp_bundle_sha)
    file(REMOVE_RECURSE "${_lp_src}")
    file(MAKE_DIRECTORY "${_lp_src}")
    execute_process(COMMAND "${GIT_EXECUTABLE}" clone -q --no-checkout "${_lp_bundle}" "${_lp_src}/repo"
                    RESULT_VARIABLE _lp_rc ERROR_VARIABLE _lp_err)
    if(_lp_rc EQUAL 0)
      execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${_lp_src}/repo" archive -o "${_lp_src}/headers.tar"
                              HEAD include ggml/include
                      RESULT_VARIABLE _lp_rc ERROR_VARIABLE _lp_err)
    endif()
    if(_lp_rc EQUAL 0)
      execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${_lp_src}/repo" rev-parse HEAD
                      OUTPUT_FILE "${_lp_src}/commit" RESULT_VARIABLE _lp_rc ERROR_VARIABLE _lp_err)
    endif()
    if(NOT _lp_rc EQUAL 0)
      message(FATAL_ERROR "llama_cpp_bench: reading the headers from ${_lp_bundle} failed: ${_lp_err}")
    endif()
    file(ARCHIVE_EXTRACT INPUT "${_lp_src}/headers.tar" DESTINATION "${_lp_src}")
    file(REMOVE_RECURSE "${_lp_src}/repo" "${_lp_src}/headers.tar")
    file(WRITE "${_lp_stamp}" "${_lp_bundle_sha}")
  endif()
  file(STRINGS "${_lp_src}/commit" _lp_commit LIMIT_COUNT 1)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_lp_bundle}")

  # Libraries: copied beside the program (configure_file re-copies when the source changes).
  file(MAKE_DIRECTORY "${NITRO_LLAMA_CPP_BENCH_DIR}")
  foreach(_lib ${_lp_llama} ${_lp_ggml} "${_lp_bins}/libggml-base.so" ${_lp_cpu})
    get_filename_component(_name "${_lib}" NAME)
    configure_file("${_lib}" "${NITRO_LLAMA_CPP_BENCH_DIR}/${_name}" COPYONLY)
    list(APPEND _lp_copied "${NITRO_LLAMA_CPP_BENCH_DIR}/${_name}")
  endforeach()
  foreach(_t llama ggml ggml_base)
    add_library(llama_peer_${_t} SHARED IMPORTED)
  endforeach()
  get_filename_component(_n "${_lp_llama}" NAME)
  set_target_properties(llama_peer_llama PROPERTIES IMPORTED_LOCATION "${NITRO_LLAMA_CPP_BENCH_DIR}/${_n}"
                        INTERFACE_INCLUDE_DIRECTORIES "${_lp_src}/include;${_lp_src}/ggml/include")
  get_filename_component(_n "${_lp_ggml}" NAME)
  set_target_properties(llama_peer_ggml PROPERTIES IMPORTED_LOCATION "${NITRO_LLAMA_CPP_BENCH_DIR}/${_n}")
  set_target_properties(llama_peer_ggml_base PROPERTIES IMPORTED_LOCATION "${NITRO_LLAMA_CPP_BENCH_DIR}/libggml-base.so")

  add_executable(llama_cpp_bench "${CMAKE_SOURCE_DIR}/bench/llama_cpp_bench.cpp")
  target_link_libraries(llama_cpp_bench PRIVATE llama_peer_llama llama_peer_ggml llama_peer_ggml_base
                        ${CMAKE_DL_LIBS})
  target_compile_definitions(llama_cpp_bench PRIVATE LLAMA_CPP_COMMIT="${_lp_commit}")
  # The prompt generator copies llama_bench.mjs's float64 arithmetic: no fused multiply-add.
  target_compile_options(llama_cpp_bench PRIVATE -ffp-contract=off)
  set_target_properties(llama_cpp_bench PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY "${NITRO_LLAMA_CPP_BENCH_DIR}"
    BUILD_RPATH "\$ORIGIN" BUILD_RPATH_USE_ORIGIN ON SKIP_BUILD_RPATH OFF)
  set(NITRO_LLAMA_CPP_BENCH_BUILT ON)
  list(LENGTH _lp_cpu _lp_ncpu)
  message(STATUS "llama_cpp_bench: llama.cpp ${_lp_commit} (prebuilt, ${_lp_ncpu} CPU variants) -> ${NITRO_LLAMA_CPP_BENCH_DIR}")
endif()
