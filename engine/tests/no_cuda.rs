//! A process with no CUDA device at all (simulation off, and `PLACELAB_NO_CUDA` hiding any real
//! GPU, so the test means the same on every machine): probing never panics,
//! `cuda_if_available` falls back to the CPU, and GPU requests get clear errors.

use placelab::prelude::*;

#[test]
fn without_a_gpu_everything_falls_back_or_explains() {
    // SAFETY: the only test of this binary, and no other thread reads the environment yet;
    // set before the first probe, which reads it once.
    unsafe { std::env::set_var("PLACELAB_NO_CUDA", "1") };
    // Simulation may come from the environment; this test is about its absence.
    cuda::simulate(0, None).unwrap();
    assert_eq!(cuda::device_count(), 0);
    assert!(!cuda::is_available());
    assert_eq!(Device::cuda_if_available(), Device::Cpu);
    assert_eq!(
        cuda::unavailable_reason().as_deref(),
        Some("PLACELAB_NO_CUDA is set")
    );
    let x = Tensor::ones([2], Device::Cpu).unwrap();
    let e = x.cuda().unwrap_err().to_string();
    assert!(
        e.starts_with("cuda:0 is not available:") && e.contains("PLACELAB_SIMULATE_CUDA"),
        "{e}"
    );
    let e = x.pin_memory().unwrap_err().to_string();
    assert!(e.contains("there is no CUDA device"), "{e}");
    assert!(cuda::memory_allocated(0).is_err());
    // What `:devices`, `placelab devices` and the REPL's banner list, from one function: the CPU
    // and why there is no CUDA device (the banner once said `no CUDA:`, `:devices` `no CUDA
    // device:`).
    let none = cuda::devices(false);
    assert_eq!(none.real, 0);
    assert_eq!(none.no_real_gpu.as_deref(), Some("PLACELAB_NO_CUDA is set"));
    let lines = none.lines();
    assert!(lines[0].starts_with("cpu ("), "{lines:?}");
    assert_eq!(lines[1..], ["no CUDA device: PLACELAB_NO_CUDA is set"]);
    // Turning simulation on in the same process makes cuda:0 usable.
    cuda::simulate(1, Some(64 << 20)).unwrap();
    assert_eq!(Device::cuda_if_available(), Device::Cuda(0));
    let y = x.cuda().unwrap();
    assert_eq!(cuda::mem_get_info(0).unwrap(), ((62) << 20, 64 << 20));
    // The listing follows the process's own state: one simulated device now, still no real one.
    let one = cuda::devices(true);
    assert_eq!((one.devices.len(), one.real, one.missing), (2, 0, None));
    assert!(
        one.devices[1].starts_with("cuda:0 (simulated)"),
        "{:?}",
        one.devices
    );
    // It cannot be switched off while a tensor lives there.
    let e = cuda::simulate(0, None).unwrap_err().to_string();
    assert!(e.contains("still live on cuda:0"), "{e}");
    drop(y);
    cuda::simulate(0, None).unwrap();
}
