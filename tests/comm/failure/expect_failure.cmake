# Runs an MPI job that must fail: a non-zero exit whose output matches EXPECT,
# within LIMIT seconds (a hang fails the test). Variables: MPIEXEC, MPI_FLAGS
# (one string), RANKS, PROBE, MODE, EXPECT, LIMIT, and optionally ALGORITHM
# (passed after MODE).
separate_arguments(flags UNIX_COMMAND "${MPI_FLAGS}")
execute_process(
  COMMAND ${MPIEXEC} --allow-run-as-root --oversubscribe ${flags} -np ${RANKS} ${PROBE} ${MODE} ${ALGORITHM}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE output
  ERROR_VARIABLE output
  TIMEOUT ${LIMIT})
message("${output}")
if(status MATCHES "timeout")
  message(FATAL_ERROR "the job hung: still running after ${LIMIT} s")
endif()
if(status STREQUAL "0")
  message(FATAL_ERROR "the job exited 0; a failure was expected")
endif()
if(NOT output MATCHES "${EXPECT}")
  message(FATAL_ERROR "exit status ${status}, but the output lacks the expected error: ${EXPECT}")
endif()
message("exit status ${status}, error reported as expected")
