# ctest python_install (docs/python.md, "Installing it"): installs the build tree into WORK/prefix
# and imports the installed module from there, with PYTHONPATH set to its site-packages (SITE,
# relative to the prefix); checks that the module imported is the installed file and that it
# works: the memory ledger of the installed tiny-gpt example has its four pipeline stages.
# Usage: cmake -DBUILD=<stepsim build> -DWORK=<scratch> -DPYTHON=<python3> -DSITE=<dir> -P install_test.cmake
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix RESULT_VARIABLE rc
                OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc}): ${err}")
endif()
set(site ${WORK}/prefix/${SITE})
file(GLOB modules ${site}/stepsim*.so)
if(NOT modules)
  message(FATAL_ERROR "no stepsim module installed under ${site}")
endif()
set(share ${WORK}/prefix/share/stepsim)
set(script "import os, stepsim
assert os.path.realpath(stepsim.__file__).startswith(os.path.realpath('${site}')), stepsim.__file__
m = stepsim.memory('${share}/topologies/dgx-h100.yaml', '${share}/workloads/tiny-gpt.yaml',
                   set={'cluster.nodes': 1, 'parallel.pp': 4, 'parallel.tp': 1})
assert len(m['stages']) == 4, m
print('imported', stepsim.__file__)
")
execute_process(COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${site} ${PYTHON} -c "${script}"
                WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "importing the installed module failed (${rc}):\n${out}\n${err}")
endif()
message(STATUS "${out}")
file(REMOVE_RECURSE ${WORK})
