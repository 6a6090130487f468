#pragma once
// Starting `strata` itself as ranks of an MPI job on this host: `strata train --nproc N`, and
// `strata compare`'s sides that run under a parallel layout.
#include <string>
#include <vector>

namespace strata::cli {

// mpirun (OpenMPI) exports OMPI_COMM_WORLD_SIZE to every rank it starts.
bool launched_by_mpirun();

// The command that runs this executable with `strata_args` as `ranks` ranks under mpirun (threads
// not pinned to one core; oversubscribed past the cores; root allowed). Fails when mpirun is missing.
std::vector<std::string> mpirun_command(int ranks, const std::vector<std::string>& strata_args);

// This executable, as /proc/self/exe names it.
std::string this_executable();

}  // namespace strata::cli
