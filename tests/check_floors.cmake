# cmake -DSOURCE_DIR=... -P check_floors.cmake
# The floors of the house, ground first. A folder's sources may include only headers of its own
# folder and of folders on lower floors: never one above, never a neighbour on its own floor.
# Each folder is one CMake library linked the same way (its CMakeLists.txt), so this is the
# link graph said by the includes; a folder that is on no floor is an error (place it here).
set(floors
  "common inferior"
  "breakpoint/x86 record"
  "breakpoint/int3"
  "breakpoint/jump"
  "breakpoint/in_tracee"
  "tracer/os"
  "tracer/symbols tracer/int3"
  "tracer/core"
  "tracer/jump"
  "restore"
  "trace uprobe"
  "compare"
  "overhead experiment"
  "report"
  "replay"
  "cli")

set(n 0)
foreach(floor IN LISTS floors)
  string(REPLACE " " ";" folders "${floor}")
  foreach(folder IN LISTS folders)
    set(floor_of_${folder} ${n})
  endforeach()
  math(EXPR n "${n} + 1")
endforeach()


set(bad "")
set(files 0)
set(edges 0)
foreach(floor IN LISTS floors)
  string(REPLACE " " ";" folders "${floor}")
  foreach(folder IN LISTS folders)
    set(mine ${floor_of_${folder}})
    file(GLOB sources ${SOURCE_DIR}/${folder}/*.cpp ${SOURCE_DIR}/${folder}/*.hpp
         ${SOURCE_DIR}/${folder}/*.c ${SOURCE_DIR}/${folder}/*.h ${SOURCE_DIR}/${folder}/*.S)
    foreach(source IN LISTS sources)
      math(EXPR files "${files} + 1")
      file(STRINGS ${source} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[^\"]+/[^\"]+\"")
      foreach(line IN LISTS includes)
        string(REGEX REPLACE ".*\"(.+)/[^/\"]+\".*" "\\1" target "${line}")
        if(target STREQUAL folder)
          continue()
        endif()
        math(EXPR edges "${edges} + 1")
        file(RELATIVE_PATH rel ${SOURCE_DIR} ${source})
        if(NOT DEFINED floor_of_${target})
          string(APPEND bad "\n  ${rel} includes ${target}/, a folder on no floor")
        elseif(NOT floor_of_${target} LESS mine)
          string(APPEND bad "\n  ${rel} (floor ${mine}) includes ${target}/ (floor ${floor_of_${target}})")
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()
message("${files} files, ${edges} includes across folders, ${n} floors")
if(bad)
  message(FATAL_ERROR "includes that run up or sideways:${bad}")
endif()
