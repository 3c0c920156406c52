# `cmake --install build --prefix P` puts dtrain in place for other CMake projects:
#   P/bin/dtrain                          the program
#   P/include/dtrain/**                   the public headers (include/dtrain/, nothing from src/)
#   P/lib/libdtrain.a                     the library (every tier's objects, CUDA kernels included)
#   P/lib/cmake/dtrain/                   dtrainConfig.cmake, dtrainConfigVersion.cmake, the
#                                         exported target dtrain::dtrain, FindNCCL.cmake
# so that a project needs only find_package(dtrain) and target_link_libraries(app dtrain::dtrain)
# (examples/CMakeLists.txt is one). What the exported target carries: Note [installed link
# interface] in CMakeLists.txt.
include(CMakePackageConfigHelpers)

set(DTRAIN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dtrain)

install(TARGETS dtrain_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS dtrain EXPORT dtrainTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/dtrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(EXPORT dtrainTargets NAMESPACE dtrain:: DESTINATION ${DTRAIN_CMAKE_DIR})

# The config records what this build was made with: its LibTorch (a hint for the consumer's
# find_package(Torch), which must find the same one) and whether it is a CUDA build.
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dtrainConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/dtrainConfig.cmake
                              INSTALL_DESTINATION ${DTRAIN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dtrainConfig.cmake ${PROJECT_BINARY_DIR}/dtrainConfigVersion.cmake
        ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake
        DESTINATION ${DTRAIN_CMAKE_DIR})
