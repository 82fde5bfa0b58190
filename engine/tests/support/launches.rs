//! Kernel launches counted on emulated devices, for the tests of launch budgets.

use std::collections::BTreeMap;

use placelab::cuda;
use placelab::gpu::emulated;

/// The launches queued on the emulated devices while `f` ran, by kernel name (cuBLAS's GEMMs as
/// `gemm`); counted as they are queued, then the queue is waited for.
pub fn launches_in(f: impl FnOnce()) -> BTreeMap<String, u64> {
    let before = emulated::launch_counts();
    f();
    cuda::synchronize(0).unwrap();
    let mut after = emulated::launch_counts();
    for (name, n) in before {
        *after.get_mut(&name).unwrap() -= n;
    }
    after.retain(|_, n| *n > 0);
    after
}
