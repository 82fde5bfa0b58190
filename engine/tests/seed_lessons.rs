//! The tutorials' model lessons, translated line by line to Rust: the SimpleNN training step on
//! CPU and GPU, the autocast + GradScaler step, and DataParallel.
//!
//! Every test here that touches a device leases it (`device_lease`): cuda:2 belongs to the
//! optimizer test alone, which counts its bytes exactly; the others share cuda:0 and cuda:1.

#[path = "support/device_lease.rs"]
mod device_lease;
#[path = "support/stand_in.rs"]
mod stand_in;

use placelab::nn::{CrossEntropyLoss, Dropout, Flatten, Linear, Module, Sigmoid, Tanh};
use placelab::prelude::*;

struct SimpleNN {
    fc1: Linear,
    fc2: Linear,
}

impl SimpleNN {
    fn new() -> Result<SimpleNN> {
        Ok(SimpleNN {
            fc1: Linear::new(784, 128, Device::Cpu)?,
            fc2: Linear::new(128, 10, Device::Cpu)?,
        })
    }
}

impl Module for SimpleNN {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = self.fc1.forward(x)?.relu()?;
        self.fc2.forward(&x)
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("fc1".into(), &self.fc1), ("fc2".into(), &self.fc2)]
    }
    fn children_mut(&mut self) -> Vec<(String, &mut dyn Module)> {
        vec![("fc1".into(), &mut self.fc1), ("fc2".into(), &mut self.fc2)]
    }
}

/// One SGD step of SimpleNN on `device`; returns the loss before and after it.
fn training_step(device: Device) -> Result<(f32, f32)> {
    let mut model = SimpleNN::new()?;
    model.to(&device)?;
    let criterion = CrossEntropyLoss::new();
    let mut optimizer = Sgd::new(model.parameters(), 0.01)?;
    let input_tensor = Tensor::randn([64, 784], Device::Cpu)?.to(&device)?;
    let target_tensor = Tensor::randint(0, 10, [64], Device::Cpu)?.to(&device)?;
    let output = model.forward(&input_tensor)?;
    let loss = criterion.forward(&output, &target_tensor)?;
    loss.backward()?;
    optimizer.step()?;
    let after = criterion.forward(&model.forward(&input_tensor)?, &target_tensor)?;
    assert_eq!(model.named_parameters()[0].0, "fc1.weight");
    assert!(model.parameters().iter().all(|p| p.device() == device));
    Ok((loss.item::<f32>()?, after.item::<f32>()?))
}

#[test]
fn simple_nn_step_on_cpu_and_gpu() -> Result<()> {
    stand_in::gpus(3, None)?;
    device_lease::shared(&[Device::cuda_if_available()]);
    for device in [Device::Cpu, Device::cuda_if_available()] {
        let (before, after) = training_step(device)?;
        assert!(
            after < before,
            "one SGD step lowers the loss on {device}: {before} → {after}"
        );
    }
    Ok(())
}

#[test]
fn mixed_precision_step_with_grad_scaler() -> Result<()> {
    stand_in::gpus(3, None)?;
    let device = Device::cuda_if_available();
    device_lease::shared(&[device]);
    let mut model = SimpleNN::new()?;
    model.to(&device)?;
    let criterion = CrossEntropyLoss::new();
    let mut optimizer = Sgd::new(model.parameters(), 0.01)?;
    let mut scaler = GradScaler::new();
    let input_tensor = Tensor::randn([64, 784], Device::Cpu)?.to(&device)?;
    let target_tensor = Tensor::randint(0, 10, [64], Device::Cpu)?.to(&device)?;
    let before = model.parameters()[0].to_vec::<f32>()?;
    let loss = autocast(DType::F16, || -> Result<Tensor> {
        let output = model.forward(&input_tensor)?;
        assert_eq!(output.dtype(), DType::F16);
        criterion.forward(&output, &target_tensor)
    })??;
    scaler.scale(&loss)?.backward()?;
    assert!(
        scaler.step(&mut optimizer)?,
        "no overflow at scale 65536 for this model"
    );
    scaler.update();
    let after = model.parameters()[0].to_vec::<f32>()?;
    assert!(
        before.iter().zip(&after).any(|(a, b)| a != b),
        "the step changed the weights"
    );
    Ok(())
}

#[test]
fn data_parallel_when_there_are_several_gpus() -> Result<()> {
    stand_in::gpus(3, None)?;
    let device = Device::cuda_if_available();
    assert!(
        cuda::device_count() > 1,
        "Data parallelism requires more than one GPU"
    );
    // Two of the three devices: `vec![]` would mean every one, cuda:2 among them, which the
    // optimizer test counts the bytes of.
    let devices = vec![Device::Cuda(0), Device::Cuda(1)];
    device_lease::shared(&devices);
    assert_eq!(device, devices[0], "the module lives on the first device");
    let mut model = DataParallel::new(SimpleNN::new()?, devices)?;
    model.to(&device)?;
    let out = model.forward(&Tensor::randn([8, 784], Device::Cpu)?)?;
    assert_eq!(
        (out.shape(), out.device()),
        (&[8usize, 10][..], Device::Cuda(0))
    );
    Ok(())
}

#[test]
fn other_layers_behave_as_in_pytorch() -> Result<()> {
    let x = Tensor::from_vec(vec![-2.0f32, 0.0, 3.0, 1.0], [2, 1, 2], Device::Cpu)?;
    assert_eq!(Flatten.forward(&x)?.shape(), &[2, 2]);
    assert_eq!(Sigmoid.forward(&x)?.to_vec::<f32>()?[1], 0.5);
    assert_eq!(Tanh.forward(&x)?.to_vec::<f32>()?[1], 0.0);
    let mut drop = Dropout::new(0.5)?;
    let ones = Tensor::ones([10_000], Device::Cpu)?;
    let y = drop.forward(&ones)?.to_vec::<f32>()?;
    let kept = y.iter().filter(|&&v| v != 0.0).count();
    assert!(
        (4_500..5_500).contains(&kept),
        "about half are kept: {kept}"
    );
    assert!(
        y.iter().all(|&v| v == 0.0 || v == 2.0),
        "survivors are scaled by 1/(1-p)"
    );
    drop.set_training(false);
    assert_eq!(drop.forward(&ones)?.to_vec::<f32>()?, vec![1.0; 10_000]);
    // p = 1 drops everything, as in PyTorch; outside [0, 1] is an error.
    assert_eq!(
        Dropout::new(1.0)?.forward(&ones)?.to_vec::<f32>()?,
        vec![0.0; 10_000]
    );
    assert!(Dropout::new(1.5).is_err() && Dropout::new(f64::NAN).is_err());
    Ok(())
}

#[test]
fn optimizer_state_lives_on_the_parameters_device() -> Result<()> {
    // Exact byte counts: cuda:2 is this test's alone (the others, on parallel threads, lease
    // cuda:0 and cuda:1; a test leasing cuda:2 too fails).
    stand_in::gpus(3, None)?;
    let d = Device::Cuda(2);
    device_lease::alone(d);
    let w = Tensor::randn([1000, 1000], d)?.requires_grad_(true)?;
    let mut opt = Adam::new(vec![w.clone()], 1e-3)?;
    w.mul(&w)?.sum_all()?.backward()?;
    let before = cuda::memory_allocated(2)?;
    opt.step()?;
    // m and v: two more 4 MB tensors on cuda:2, none on the CPU.
    assert_eq!(cuda::memory_allocated(2)? - before, 2 * 4_000_256);
    let state = opt.state();
    assert_eq!(state.len(), 2, "Adam keeps two moments per parameter");
    assert!(
        state
            .iter()
            .all(|t| t.device() == d && t.shape() == [1000, 1000])
    );
    Ok(())
}

/// `torch.tensor([1.0, 2.0, 3.0])` lands on the CPU; after `torch.set_default_device("cuda")`
/// it lands on the GPU, while constructors given a device keep theirs.
#[test]
fn tensors_made_without_a_device_land_on_the_default_one() -> Result<()> {
    stand_in::gpus(3, None)?;
    device_lease::shared(&[Device::Cuda(0), Device::Cuda(1)]);
    assert_eq!(default_device(), Device::Cpu);
    let on_cpu = tensor![1.0, 2.0, 3.0]?;
    assert_eq!((on_cpu.device(), on_cpu.dtype()), (Device::Cpu, DType::F32));
    set_default_device(&Device::Cuda(1))?;
    let moved_default = (
        Tensor::new([[1, 2], [3, 4]]),
        Tensor::zeros([2], ()),
        Tensor::ones([2], DType::F16),
        Tensor::zeros([2], Device::Cpu),
        Tensor::from_slice(&[1u8, 2], [2], (DType::F32, Device::Cuda(0))),
    );
    set_default_device(&Device::Cpu)?;
    let (ints, zeros, halves, explicit, converted) = moved_default;
    let ints = ints?;
    assert_eq!((ints.device(), ints.dtype()), (Device::Cuda(1), DType::I64));
    assert_eq!(zeros?.device(), Device::Cuda(1));
    let halves = halves?;
    assert_eq!(
        (halves.device(), halves.dtype()),
        (Device::Cuda(1), DType::F16)
    );
    assert_eq!(explicit?.device(), Device::Cpu);
    let converted = converted?;
    assert_eq!(
        (converted.device(), converted.dtype()),
        (Device::Cuda(0), DType::F32)
    );
    assert_eq!(converted.to_vec::<f32>()?, vec![1.0, 2.0]);
    // The values came from the host, as with `torch.tensor(data, dtype=…, device="cuda")`:
    // converted there, so the copy carries the f32 bytes, and logged like a `.to()`.
    let sent = converted
        .last_transfer()
        .expect("values from the host cross to the GPU");
    assert_eq!(
        (sent.from, sent.to, sent.bytes, sent.dtype),
        (Device::Cpu, Device::Cuda(0), 8, DType::F32)
    );
    let missing = set_default_device(&Device::Cuda(5))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("cuda:5 is not available"), "{missing}");
    assert_eq!(default_device(), Device::Cpu);
    Ok(())
}

/// The lease check itself, on threads named as the harness names tests' threads. (cuda:7 and
/// cuda:8 need not exist: nothing runs on them.)
#[test]
fn a_device_leased_alone_cannot_be_used_by_another_test() {
    let as_test = |name: &str, lease: fn()| -> std::result::Result<(), String> {
        let thread = std::thread::Builder::new().name(name.into());
        let outcome = thread.spawn(lease).unwrap().join();
        outcome.map_err(|e| *e.downcast::<String>().expect("a panic message"))
    };
    // Held alone, then used by another test.
    as_test("counts_bytes", || device_lease::alone(Device::Cuda(7))).unwrap();
    let err = as_test("uses_it", || device_lease::shared(&[Device::Cuda(7)])).unwrap_err();
    assert!(
        err.starts_with("cuda:7: `counts_bytes` needs it alone") && err.contains("`uses_it`"),
        "{err}"
    );
    // Used, then asked for alone.
    as_test("uses_it_first", || device_lease::shared(&[Device::Cuda(8)])).unwrap();
    let err = as_test("counts_later", || device_lease::alone(Device::Cuda(8))).unwrap_err();
    assert!(
        err.starts_with("cuda:8: `counts_later` needs it alone") && err.contains("`uses_it_first`"),
        "{err}"
    );
    // Shared leases never clash.
    as_test("shares_too", || device_lease::shared(&[Device::Cuda(8)])).unwrap();
}

/// The tests above, again on emulated devices: the CUDA backend and `kernels/*.cu` do the work.
#[test]
fn every_test_again_on_emulated_devices() {
    stand_in::rerun_emulated("every_test_again_on_emulated_devices");
}
