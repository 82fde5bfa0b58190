//! The README's tour, run as written (on a simulated GPU), so its claims stay true.

// Written as the README shows it, `&Device::Cpu` included.
#![allow(clippy::needless_borrows_for_generic_args)]

use placelab::prelude::*;

#[test]
fn the_readme_tour_holds() -> Result<()> {
    cuda::simulate(1, None)?;
    let device = Device::cuda_if_available();
    assert_eq!(device, Device::Cuda(0));
    let x = Tensor::randn([1000, 1000], &Device::Cpu)?;
    let y = x.to(&device)?;
    let card = y.to_string();
    assert!(
        card.starts_with(
            "Tensor f32[1000, 1000] · cuda:0 (simulated) · 3.81 MiB · last .to(): cpu → cuda:0, "
        ),
        "{card}"
    );
    assert!(
        card.contains("pageable, simulated: host copy time)\n[["),
        "{card}"
    );
    let z = &x + &y;
    assert!(
        z.unwrap_err()
            .to_string()
            .starts_with("device mismatch in add: `self` is on cpu but `other` is on cuda:0")
    );
    let w = (&y.matmul(&y)? * 2.0)?.softmax(-1)?;
    assert_eq!(w.device(), device);
    assert_eq!(cuda::memory_allocated(0)?, 8_000_512);
    drop(y);
    drop(w);
    assert_eq!(cuda::memory_allocated(0)?, 0);
    // One 20 MiB segment held the four 4 MB blocks; a 2 MiB one held the scalar `2.0`.
    assert_eq!(cuda::empty_cache(), 22 << 20);
    assert_eq!(cuda::memory_reserved(0)?, 0);
    Ok(())
}
