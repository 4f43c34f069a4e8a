# The strategies' files from their one list. algorithms/builtin_strategies.h names each
# strategy once, X(Name, file), where `file` is the stem of the source that defines
# `NameStrategy()`; asgd_builtin_strategy_files() reads those stems so that the library's
# sources (algorithms/CMakeLists.txt) and the strategies' own test files
# (tests/algorithms/CMakeLists.txt) follow the list without a second edit. Editing the
# list re-runs CMake (CMAKE_CONFIGURE_DEPENDS).
function(asgd_builtin_strategy_files out_var)
  set(list_file "${PROJECT_SOURCE_DIR}/algorithms/builtin_strategies.h")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${list_file}")
  file(READ "${list_file}" text)
  # A line of the list is "  X(Name, file)" at the start of a line (a comment may name the
  # form too, never at a line's start); its trailing backslash is not part of the match.
  string(REGEX MATCHALL "\n *X\\([A-Za-z0-9]+, *[a-z0-9_]+\\)" lines "${text}")
  set(stems)
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^\n *X\\([A-Za-z0-9]+, *([a-z0-9_]+)\\)$" "\\1" stem "${line}")
    list(APPEND stems "${stem}")
  endforeach()
  list(REMOVE_DUPLICATES stems)
  if(NOT stems)
    message(FATAL_ERROR "${list_file}: no X(Name, file) line in ASGD_BUILTIN_STRATEGIES")
  endif()
  set(${out_var} "${stems}" PARENT_SCOPE)
endfunction()
