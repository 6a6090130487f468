#!/usr/bin/env bash
# Under mpirun, with strata-comm's path as $1: runs a long MPI-baseline
# comm-bench and, on rank 1, kills it with SIGKILL 2 s in, mid-collective, so
# that the survivors' timeout must end the job.
if [[ "${OMPI_COMM_WORLD_RANK:-0}" == 1 ]]; then
  (sleep 2; kill -9 $$) &
fi
exec "$1" comm-bench -a baseline -b 64M -e 64M -n 100000 --rounds 1
