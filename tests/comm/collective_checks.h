// Checks of the Communicator contract (comm/communicator.h) that every implementation must
// pass, written once and run on every rank: by threads over InProcessCommunicator
// (communicator_test.cc) and by mpirun ranks over MpiCommunicator (mpi_communicator_test.cc).
// Each returns "" when the collective gave this rank what the contract says, else what differed.
#pragma once

#include <string>

#include "comm/communicator.h"

namespace fullband::comm {

// Runs every check on `comm`; "" when all pass.
std::string CheckCollectives(Communicator& comm);

}  // namespace fullband::comm
