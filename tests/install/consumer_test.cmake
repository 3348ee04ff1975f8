# ctest install_consumer (docs/library.md): installs the build tree into WORK/prefix, builds the
# consumer project against it from an empty build folder, simulates one step through the public
# API and checks that its summary is, byte for byte, the summary.json the installed CLI writes for
# the same inputs, and that the memory ledger reports the stages the layout has.
# Usage: cmake -DBUILD=<stepsim build> -DSOURCE=<consumer source> -DWORK=<scratch> [-DCXX=...]
#        [-DLAUNCHER=ccache] [-DSANITIZE=address,...] -P consumer_test.cmake
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
set(flags "")
if(SANITIZE) # libraries built with STEPSIM_SANITIZE need the same runtime in the program
  set(flags "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE}" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
run(${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix)
run(${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER} ${flags})
run(${CMAKE_COMMAND} --build ${WORK}/build)

set(share ${WORK}/prefix/share/stepsim)
set(cluster ${share}/topologies/dgx-h100.yaml)
set(workload ${share}/workloads/tiny-gpt.yaml)
run(${WORK}/build/consumer ${cluster} ${workload} cluster.nodes=1 parallel.pp=4 parallel.tp=1)
set(api_out "${out}")
run(${WORK}/prefix/bin/stepsim run --cluster ${cluster} --workload ${workload} --set cluster.nodes=1
    --set parallel.pp=4 --set parallel.tp=1 --no-trace --quiet --out ${WORK}/cli)
file(READ ${WORK}/cli/summary.json cli_summary)
string(LENGTH "${cli_summary}" n)
string(SUBSTRING "${api_out}" 0 ${n} api_summary)
if(NOT api_summary STREQUAL cli_summary)
  message(FATAL_ERROR "the API's summary differs from the CLI's summary.json:\n${api_out}\n---\n${cli_summary}")
endif()
string(SUBSTRING "${api_out}" ${n} -1 memory)
string(JSON stages LENGTH "${memory}" stages)
if(NOT stages EQUAL 4)
  message(FATAL_ERROR "expected 4 pipeline stages in the memory ledger, got ${stages}:\n${memory}")
endif()
string(JSON step GET "${cli_summary}" step_time_s)
message(STATUS "consumer: step ${step} s, summary identical to the CLI's, 4 stages in the ledger")
