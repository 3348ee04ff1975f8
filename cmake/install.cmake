# `cmake --install BUILD [--prefix DIR]`: the stepsim CLI, the public C++ API (api/stepsim.hpp) with
# the headers it reaches, its libraries as the CMake package `stepsim` (find_package(stepsim),
# target stepsim::api), and the bundled topologies, workloads, kernel profiles and sweeps
# (docs/library.md).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# stepsim::api and every library it links, public or not (static libraries pass their private
# links on to the program that links them).
set(STEPSIM_EXPORTED core log spec config model kernels graph topology collectives engine report runner api)

foreach(module IN LISTS STEPSIM_EXPORTED)
  set_target_properties(stepsim_${module} PROPERTIES EXPORT_NAME ${module})
  list(APPEND stepsim_exported_targets stepsim_${module})
endforeach()
# The headers, in the layout they include each other by (include/stepsim/<module>/*.hpp).
foreach(folder core config model kernels graph topology collectives engine report runner api)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/sim/${folder}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/stepsim/${folder}
          FILES_MATCHING PATTERN "*.hpp")
endforeach()

install(TARGETS stepsim RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ${stepsim_exported_targets} EXPORT stepsimTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT stepsimTargets NAMESPACE stepsim:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/stepsim)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/stepsimConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/stepsimConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/stepsim)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/stepsimConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/stepsimConfig.cmake ${PROJECT_BINARY_DIR}/stepsimConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/stepsim)

# Inputs, in the layout their relative references expect (topologies name ../kernels_profiles/data).
foreach(folder topologies workloads sweeps kernels_profiles/data)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${folder}/ DESTINATION ${CMAKE_INSTALL_DATADIR}/stepsim/${folder})
endforeach()
