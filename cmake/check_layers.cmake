# The layering of src/ (docs/architecture.md, "Layers"): every folder may include headers of its own
# folder and of the folders before it in NITRO_LAYERS, never of one after it. Run as a test:
#   cmake -DSRC=<checkout>/src -P cmake/check_layers.cmake
# Fails listing every include that goes up, and any folder of src/ missing from the list.
#
# Order, lowest first: identifiers and files; the weight formats and the GGUF container; the
# parameter structs shared by the CPU and CUDA kernels; the kernels; the architectures; the
# tokenizer; traces; the expert cache; the simulator; the engine; the GPU engine; response
# grammars; the benchmark harness; the server; the command line.
set(NITRO_LAYERS core hub quant gguf ops cpu cuda arch tokenizer trace cache sim runtime gpu grammar bench server cli)

if(NOT SRC)
  message(FATAL_ERROR "usage: cmake -DSRC=<checkout>/src -P check_layers.cmake")
endif()

file(GLOB folders LIST_DIRECTORIES true RELATIVE "${SRC}" "${SRC}/*")
set(errors "")
foreach(f ${folders})
  if(IS_DIRECTORY "${SRC}/${f}")
    list(FIND NITRO_LAYERS "${f}" rank)
    if(rank EQUAL -1)
      string(APPEND errors "  src/${f}/ is not in the layer list of cmake/check_layers.cmake\n")
    endif()
  endif()
endforeach()

foreach(folder ${NITRO_LAYERS})
  if(NOT IS_DIRECTORY "${SRC}/${folder}")
    continue()
  endif()
  list(FIND NITRO_LAYERS "${folder}" rank)
  file(GLOB_RECURSE files "${SRC}/${folder}/*.h" "${SRC}/${folder}/*.cpp" "${SRC}/${folder}/*.cu"
       "${SRC}/${folder}/*.cuh")
  foreach(path ${files})
    file(STRINGS "${path}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"[a-z_]+/")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([a-z_]+)/.*" "\\1" target "${line}")
      list(FIND NITRO_LAYERS "${target}" trank)
      if(trank EQUAL -1)
        continue()  # not a folder of src/ (e.g. "CLI/CLI.hpp")
      endif()
      if(trank GREATER rank)
        file(RELATIVE_PATH rel "${SRC}/.." "${path}")
        string(STRIP "${line}" line)
        string(APPEND errors "  ${rel}: ${line} (${folder} is below ${target})\n")
      endif()
    endforeach()
  endforeach()
endforeach()

if(errors)
  message(FATAL_ERROR "includes that go up a layer (order: ${NITRO_LAYERS}):\n${errors}")
endif()
message(STATUS "layers: every include of src/ goes down or sideways (order: ${NITRO_LAYERS})")
