#pragma once
// A test-only switch that plants one numerical fault in one `cpu` kernel, so that `strata compare`'s
// verdicts can be checked against a known bug in a real run. STRATA_TEST_PLANT_FAULT=<op>:<kind>, read
// here only, when the backends are first built; unset, nothing changes. Kinds, each a bug a kernel author
// makes:
//   eps       the op's attr `eps` ten times what the node says (a wrong epsilon)
//   scale     the op's attr `scale` ignored (1), or for attention without one the 1/sqrt(head_dim) missing
//   offbyone  the reduction loop stops one short: the last element of input 0's last dimension left out
//   mask      causal attention's mask one position off: query i also sees key i + 1 (the forward only; the
//             backward stays the real kernel's, as the forward's divergence is the one to find)
// A wrong accumulation order is not a fault and is not plantable.
#include "ops/backend.h"

namespace strata {

// Wraps the kernels of the op STRATA_TEST_PLANT_FAULT names in `backend` (every dtype); fails naming
// the variable when it names an unknown op or kind, or a kind the op cannot have.
void plant_test_fault(Backend& backend);

}  // namespace strata
