# Run at build time (cmake -P) so the commit in provenance.json is the one built,
# not the one configured. Writes OUT only when the content changes.
set(commit "unknown")
set(dirty "false")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS "${SRC}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse HEAD WORKING_DIRECTORY "${SRC}"
                  OUTPUT_VARIABLE out RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND out)
    set(commit "${out}")
    execute_process(COMMAND "${GIT_EXECUTABLE}" status --porcelain --untracked-files=no
                    WORKING_DIRECTORY "${SRC}" OUTPUT_VARIABLE st ERROR_QUIET)
    if(st)
      set(dirty "true")
    endif()
  endif()
endif()
set(content "// Generated at build time by cmake/GitInfo.cmake; do not edit.
#include \"core/build_info.h\"
namespace asgd {
const char* GitCommit() { return \"${commit}\"; }
bool GitDirty() { return ${dirty}; }
}  // namespace asgd
")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
else()
  set(old "")
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
