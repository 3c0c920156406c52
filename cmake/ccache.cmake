# Compiles through ccache where it is installed (Debian's ccache, which launch/setup.sh installs)
# and no compiler launcher was chosen: a second build of the same sources, in another build
# folder or another clone of the repository (CI's), takes its objects from the cache and
# recompiles only what changed. What ccache needs for that here:
#   - precompiled headers (DTRAIN_USE_PCH): the sloppiness ccache's manual asks for with them;
#   - another clone: paths under the source folder hashed relative to the build folder
#     (CCACHE_BASEDIR), and no -g in Release builds (the build folder's path is then not hashed).
# DTRAIN_CCACHE=OFF compiles without it.
option(DTRAIN_CCACHE "Compile through ccache when it is installed" ON)
if(DTRAIN_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(DTRAIN_CCACHE_PROGRAM ccache)
  if(DTRAIN_CCACHE_PROGRAM)
    set(_dtrain_launcher ${CMAKE_COMMAND} -E env
        "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime,locale"
        "CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}" "CCACHE_NOHASHDIR=1" ${DTRAIN_CCACHE_PROGRAM})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_dtrain_launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${_dtrain_launcher})
    message(STATUS "dtrain: compiling through ${DTRAIN_CCACHE_PROGRAM}")
  endif()
endif()
