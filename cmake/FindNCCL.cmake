# Finds NCCL for the CUDA build of dtrain.
# Search order: NCCL_ROOT / $NCCL_ROOT, the nvidia-nccl package that sits beside a pip-installed
# torch (so that dtrain and LibTorch load the same libnccl), the CUDA toolkit, system paths.
# Defines NCCL::NCCL, NCCL_FOUND, NCCL_VERSION.
set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT})
if(Torch_DIR)
  # .../site-packages/torch/share/cmake/Torch -> .../site-packages/nvidia/nccl
  get_filename_component(_site "${Torch_DIR}/../../../.." ABSOLUTE)
  list(APPEND _nccl_hints "${_site}/nvidia/nccl" "${_site}/nvidia/cu13" "${_site}/nvidia/cu12")
endif()
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _nccl_hints ${CUDAToolkit_LIBRARY_ROOT})
endif()
list(APPEND _nccl_hints /usr/local/cuda /usr)

find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hints}
             PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _maj REGEX "^#define NCCL_MAJOR +[0-9]+")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _min REGEX "^#define NCCL_MINOR +[0-9]+")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _pat REGEX "^#define NCCL_PATCH +[0-9]+")
  string(REGEX MATCH "[0-9]+$" _maj "${_maj}")
  string(REGEX MATCH "[0-9]+$" _min "${_min}")
  string(REGEX MATCH "[0-9]+$" _pat "${_pat}")
  set(NCCL_VERSION "${_maj}.${_min}.${_pat}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
                                  VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::NCCL)
  add_library(NCCL::NCCL UNKNOWN IMPORTED)
  set_target_properties(NCCL::NCCL PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
