//! User mistakes: each is an `Err` whose message names the operation, both sides, and the fix.
//! None may panic. Last, `Interrupted`, the error a user asks for (Ctrl-C, the stop button): it
//! stops only the cell it was meant for.

#[path = "support/own_process.rs"]
mod own_process;
#[path = "support/stand_in.rs"]
mod stand_in;

use std::panic::{AssertUnwindSafe, catch_unwind};

use placelab::prelude::*;

const CPU: &Device = &Device::Cpu;

#[test]
fn device_mismatch_names_the_op_both_devices_and_the_fix() {
    stand_in::gpus(2, None).unwrap();
    let x = Tensor::randn([3], CPU).unwrap();
    let y = Tensor::randn([3], Device::Cuda(0)).unwrap();
    let e = (&x + &y).unwrap_err();
    assert_eq!(
        e.to_string(),
        "device mismatch in add: `self` is on cpu but `other` is on cuda:0.\n\
         Tensors must share a device; move one first, e.g. `.to(&Device::Cuda(0))?` on the tensor that is on cpu."
    );
    let e = y.matmul(&x).unwrap_err().to_string();
    assert!(
        e.starts_with("device mismatch in matmul: `self` is on cuda:0 but `other` is on cpu."),
        "{e}"
    );
    let c = Tensor::ones([3], (DType::Bool, &Device::Cuda(1))).unwrap();
    let e = Tensor::where_cond(&c, &y, &y).unwrap_err().to_string();
    assert!(
        e.contains("`condition` is on cuda:1 but `x` is on cuda:0"),
        "{e}"
    );
    let e = Tensor::cat(&[&y, &x], 0).unwrap_err().to_string();
    assert!(
        e.contains("`tensors[0]` is on cuda:0 but `tensors[1]` is on cpu"),
        "{e}"
    );
}

/// As in PyTorch, a 0-d CPU tensor (a "CPU scalar") is no mismatch: it meets a tensor on any
/// device, in either order, and the result lives on that device; gradients flow back to it.
/// A CPU tensor with one dimension is still refused, even with one element.
#[test]
fn a_zero_dim_cpu_tensor_mixes_with_gpu_tensors_as_in_pytorch() {
    stand_in::gpus(1, None).unwrap();
    let gpu = Device::Cuda(0);
    let y = Tensor::from_vec(vec![1.0f32, -2.0, 3.0], [3], gpu).unwrap();
    let two = Tensor::scalar(2.0, CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let product = (&y * &two).unwrap();
    assert_eq!(product.device(), gpu);
    assert_eq!(product.to_vec::<f32>().unwrap(), [2.0, -4.0, 6.0]);
    let reversed = two.sub(&y).unwrap();
    assert_eq!(
        (reversed.device(), reversed.to_vec::<f32>().unwrap()),
        (gpu, vec![1.0, 4.0, -1.0])
    );
    assert_eq!(
        y.gt(&two).unwrap().to_vec::<bool>().unwrap(),
        [false, false, true]
    );
    // An f64 0-d tensor does not promote an f32 tensor, as PyTorch's type promotion says.
    let wide = Tensor::scalar(0.5f64, (DType::F64, CPU)).unwrap();
    assert_eq!(y.add(&wide).unwrap().dtype(), DType::F32);
    product.sum_all().unwrap().backward().unwrap();
    let grad = two.grad().expect("the CPU scalar gets its gradient");
    assert_eq!(
        (grad.device(), grad.item::<f32>().unwrap()),
        (Device::Cpu, 2.0)
    );
    let one = Tensor::from_vec(vec![2.0f32], [1], CPU).unwrap();
    let e = y.add(&one).unwrap_err().to_string();
    assert!(e.starts_with("device mismatch in add"), "{e}");
}

/// Every call here is a mistake; each must return `Err` with the given fragment, without panicking.
#[test]
fn bad_input_gets_clear_errors_and_never_panics() {
    let x = Tensor::arange(0.0, 6.0, CPU)
        .unwrap()
        .reshape([2, 3])
        .unwrap();
    let i = Tensor::arange(0, 6, CPU).unwrap();
    type Case<'a> = (&'a str, Box<dyn Fn() -> Result<Tensor> + 'a>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "broadcast",
            Box::new(|| &x + &Tensor::ones([4], CPU)?),
            "shape mismatch in add: [2, 3] and [4]",
        ),
        (
            "matmul inner",
            Box::new(|| x.matmul(&x)),
            "a 2×3 matrix cannot multiply a 2×3 one",
        ),
        (
            "matmul dtype",
            Box::new(|| x.matmul(&x.t()?.to_dtype(DType::F64)?)),
            "dtype mismatch in matmul: f32 and f64",
        ),
        (
            "matmul scalar",
            Box::new(|| x.matmul(&Tensor::scalar(2.0, CPU)?)),
            "at least one dimension",
        ),
        (
            "dim",
            Box::new(|| x.sum(2, false)),
            "dimension 2 out of range in sum: the tensor has 2 dimension(s), so dims go from -2 to 1",
        ),
        (
            "neg dim",
            Box::new(|| x.softmax(-3)),
            "dimension -3 out of range in softmax",
        ),
        (
            "repeat dim",
            Box::new(|| x.sum([0, -2], false)),
            "dim -2 appears more than once",
        ),
        (
            "index",
            Box::new(|| x.index_select(1, &Tensor::from_vec(vec![0i64, 3], [2], CPU)?)),
            "index 3 out of range in index_select: dimension 1 has size 3",
        ),
        (
            "index dtype",
            Box::new(|| x.index_select(0, &x)),
            "must be a 1-D i64 or i32 tensor",
        ),
        (
            "narrow",
            Box::new(|| x.narrow(1, 2, 2)),
            "start 2 + length 2 exceeds dimension 1 of size 3",
        ),
        (
            "reshape",
            Box::new(|| x.reshape([4, 2])),
            "a tensor of 6 elements cannot be reshaped to 8 elements",
        ),
        (
            "reshape -1",
            Box::new(|| x.reshape([4, -1])),
            "6 elements cannot be split into [4, -1]",
        ),
        (
            "reshape two -1",
            Box::new(|| x.reshape([-1, -1])),
            "only one dimension may be -1",
        ),
        (
            "permute",
            Box::new(|| x.permute([0])),
            "names 1 dims but the tensor has 2",
        ),
        (
            "cat shapes",
            Box::new(|| Tensor::cat(&[&x, &x.t()?], 0)),
            "must match in every dimension except 0",
        ),
        (
            "stack shapes",
            Box::new(|| Tensor::stack(&[&x, &i], 0)),
            "must have the same shape",
        ),
        (
            "cat empty",
            Box::new(|| Tensor::cat(&[], 0)),
            "needs at least one tensor",
        ),
        (
            "from_vec",
            Box::new(|| Tensor::from_vec(vec![1.0f32; 5], [2, 3], CPU)),
            "5 values cannot fill a tensor of 6 elements",
        ),
        (
            "mean int",
            Box::new(|| i.mean_all()),
            "mean is not supported for dtype i64",
        ),
        (
            "softmax int",
            Box::new(|| i.softmax(0)),
            "softmax is not supported for dtype i64",
        ),
        (
            "bool sub",
            Box::new(|| x.gt(1.0)?.sub(&x.gt(2.0)?)),
            "sub is not supported for dtype bool",
        ),
        (
            "bool neg",
            Box::new(|| x.gt(1.0)?.neg()),
            "neg is not supported for dtype bool",
        ),
        (
            "int pow",
            Box::new(|| i.pow(-1)),
            "negative integer powers are not allowed",
        ),
        (
            "where cond",
            Box::new(|| Tensor::where_cond(&x, &x, &x)),
            "The condition must be a bool tensor",
        ),
        (
            "arange step",
            Box::new(|| Tensor::arange_step(0, 5, 0, CPU)),
            "step non-zero",
        ),
        (
            "arange sign",
            Box::new(|| Tensor::arange_step(5, 0, 1, CPU)),
            "the step's sign is wrong",
        ),
        (
            "randint",
            Box::new(|| Tensor::randint(3, 3, [2], CPU)),
            "low (3) must be below high (3)",
        ),
        (
            "rand int",
            Box::new(|| Tensor::rand([2], (DType::I64, CPU))),
            "rand is not supported for dtype i64",
        ),
        (
            "max empty",
            Box::new(|| Tensor::zeros([0, 3], CPU)?.max_all()),
            "the maximum of nothing does not exist",
        ),
        (
            "clamp none",
            Box::new(|| x.clamp(None::<f64>, None::<f64>)),
            "give at least one of min and max",
        ),
        (
            "t 3d",
            Box::new(|| Tensor::zeros([2, 2, 2], CPU)?.t()),
            "t() expects a tensor with at most 2 dims",
        ),
        (
            "overflow",
            Box::new(|| Tensor::zeros([usize::MAX, 2], CPU)),
            "more elements or bytes than this machine can address",
        ),
        (
            "huge",
            Box::new(|| Tensor::zeros([1usize << 40], CPU)),
            "out of memory on cpu: tried to allocate 4.00 TiB",
        ),
        (
            "cuda:99",
            Box::new(|| x.to(&Device::Cuda(99))),
            "cuda:99 is not available",
        ),
        (
            "0-dim dim",
            Box::new(|| Tensor::scalar(1.0, CPU)?.transpose(0, 1)),
            "the tensor is 0-dimensional",
        ),
    ];
    let mut wrong = Vec::new();
    for (name, f, want) in &cases {
        match catch_unwind(AssertUnwindSafe(f)) {
            Err(_) => wrong.push(format!("{name}: PANICKED")),
            Ok(Ok(t)) => wrong.push(format!("{name}: succeeded with {:?}", t.shape())),
            Ok(Err(e)) if !e.to_string().contains(want) => {
                wrong.push(format!("{name}: message {e:?} lacks {want:?}"))
            }
            Ok(Err(_)) => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn reading_values_checks_the_element_type() {
    let x = Tensor::ones([2, 2], CPU).unwrap();
    let e = x.to_vec::<i64>().unwrap_err().to_string();
    assert!(
        e.contains("holds f32 but i64 was requested") && e.contains("to_dtype(DType::I64)"),
        "{e}"
    );
    let e = x.item::<f32>().unwrap_err().to_string();
    assert!(
        e.contains("4 elements (shape [2, 2]) cannot be read as one value"),
        "{e}"
    );
    assert!(
        x.to_vec2::<f32>().is_ok() && Tensor::ones([2], CPU).unwrap().to_vec2::<f32>().is_err()
    );
}

#[test]
fn device_strings_parse_or_list_the_accepted_forms() {
    assert_eq!("cuda:1".parse::<Device>().unwrap(), Device::Cuda(1));
    let e = "gpu0".parse::<Device>().unwrap_err().to_string();
    assert_eq!(
        e,
        "cannot parse \"gpu0\" as a device. Accepted forms: \"cpu\", \"cuda\" (= cuda:0), \"cuda:N\" with N a device index, e.g. \"cuda:1\"."
    );
}

/// The slips a learner makes by accident: empty and 0-d shapes are ordinary tensors, and absurd
/// sizes are errors naming the request; none may panic or abort the process (which would lose
/// every variable of a REPL or notebook).
#[test]
fn empty_shapes_work_and_absurd_sizes_are_errors() {
    let empty = Tensor::zeros([2, 0], CPU).unwrap();
    assert_eq!(empty.exp().unwrap().shape(), &[2, 0]);
    assert_eq!(
        Tensor::zeros([0, 784], CPU)
            .unwrap()
            .mul(2.0)
            .unwrap()
            .shape(),
        &[0, 784]
    );
    assert_eq!(empty.sum_all().unwrap().item::<f32>().unwrap(), 0.0);
    assert!(empty.mean_all().unwrap().item::<f32>().unwrap().is_nan());
    assert!(empty.to_vec::<f32>().unwrap().is_empty());
    let sum = (&Tensor::zeros([3, 0], CPU).unwrap() + &Tensor::ones([1], CPU).unwrap()).unwrap();
    assert_eq!(sum.shape(), &[3, 0]);
    let e = empty.max_all().unwrap_err().to_string();
    assert!(e.contains("maximum of nothing"), "{e}");
    // The rows exist, each of three values: the maximum of each is defined (and there are none).
    assert_eq!(
        Tensor::zeros([0, 3], CPU)
            .unwrap()
            .max(1, false)
            .unwrap()
            .shape(),
        &[0]
    );

    let e = Tensor::scalar(1.0, CPU)
        .unwrap()
        .narrow(0, 0, 1)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("0-dimensional tensor has no dimension to narrow"),
        "{e}"
    );

    let e = Tensor::arange(0i64, 1i64 << 40, CPU)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("out of memory on cpu: tried to allocate 8.00 TiB"),
        "{e}"
    );
    let e = Tensor::arange(0i64, i64::MAX, CPU).unwrap_err().to_string();
    assert!(
        e.contains("in arange has more elements or bytes than this machine can address"),
        "{e}"
    );
    let one = Tensor::ones([1], CPU).unwrap();
    let e = one.broadcast_to([usize::MAX, 2]).unwrap_err().to_string();
    assert!(e.contains("broadcast_to"), "{e}");
    let wide = one.broadcast_to([1usize << 40]).unwrap();
    assert_eq!(wide.numel(), 1 << 40);
    let e = wide.to_vec::<f32>().unwrap_err().to_string();
    assert!(
        e.starts_with("out of memory on cpu: tried to allocate 4.00 TiB"),
        "{e}"
    );
    let e = wide.exp().unwrap_err().to_string();
    assert!(e.starts_with("out of memory on cpu"), "{e}");
    let batch = Tensor::ones([1, 2, 2], CPU)
        .unwrap()
        .broadcast_to([1usize << 40, 2, 2])
        .unwrap();
    let e = batch.matmul(&batch).unwrap_err().to_string();
    assert!(
        e.contains("out of memory") || e.contains("too large"),
        "{e}"
    );
}

/// `index_select`'s gradient is a scatter-add into a zero gradient: an embedding-sized lookup
/// needs the table's gradient, not a table × lookups one-hot matrix (here 400 GB).
#[test]
fn index_select_backward_adds_rows_back_without_a_dense_one_hot() {
    let table = Tensor::randn([1_000_000, 4], CPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    // Every tenth row once, and row 3 twice.
    let picks: Vec<i64> = (0..100_000).map(|i| i * 10).chain([3, 3]).collect();
    let n = picks.len();
    let index = Tensor::from_vec(picks, [n], CPU).unwrap();
    table
        .index_select(0, &index)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    let grad = table.grad().unwrap();
    assert_eq!(grad.shape(), &[1_000_000, 4]);
    let rows = grad.sum(1, false).unwrap().to_vec::<f32>().unwrap();
    assert_eq!((rows[3], rows[0], rows[1]), (8.0, 4.0, 0.0));
    assert_eq!(rows.iter().sum::<f32>(), 4.0 * n as f32);
}

/// Empty batches through the layers a training step uses, as PyTorch treats them.
#[test]
fn empty_batches_flow_through_layers_losses_and_indexing() {
    use placelab::nn::{CrossEntropyLoss, Linear, MSELoss};
    let layer = Linear::new(784, 10, Device::Cpu).unwrap();
    let none = Tensor::zeros([0, 784], CPU).unwrap();
    let out = layer.forward(&none).unwrap();
    assert_eq!(out.shape(), &[0, 10]);
    assert_eq!(out.softmax(1).unwrap().shape(), &[0, 10]);
    assert_eq!(out.argmax(1, false).unwrap().shape(), &[0]);
    // The mean over no samples is NaN, as in PyTorch.
    let targets = Tensor::zeros([0], (DType::I64, CPU)).unwrap();
    let loss = CrossEntropyLoss::new().forward(&out, &targets).unwrap();
    assert!(loss.item::<f32>().unwrap().is_nan());
    let mse = MSELoss::new().forward(&out, &out).unwrap();
    assert!(mse.item::<f32>().unwrap().is_nan());
    let picked = Tensor::randn([5, 3], CPU)
        .unwrap()
        .index_select(0, &Tensor::zeros([0], (DType::I64, CPU)).unwrap())
        .unwrap();
    assert_eq!(picked.shape(), &[0, 3]);
    let joined = Tensor::cat(&[&none, &Tensor::ones([2, 784], CPU).unwrap()], 0).unwrap();
    assert_eq!(joined.shape(), &[2, 784]);
    let cond = Tensor::zeros([0, 784], (DType::Bool, CPU)).unwrap();
    assert_eq!(
        Tensor::where_cond(&cond, &none, &none).unwrap().shape(),
        &[0, 784]
    );
    assert_eq!(
        Tensor::zeros([3, 0], CPU)
            .unwrap()
            .softmax(1)
            .unwrap()
            .shape(),
        &[3, 0]
    );
}

/// The tests above, again on emulated devices: the CUDA backend and `kernels/*.cu` do the work.
#[test]
fn every_test_again_on_emulated_devices() {
    stand_in::rerun_emulated("every_test_again_on_emulated_devices");
}

/// The front end's interrupt is a SIGINT to the cell's process naming the cell it meant, and a
/// signal is handled whenever that process next runs: one meant for a cell that has ended must
/// not stop the next (the soak of interrupts saw a cell stop at its first op, never touched).
/// One that names cell 0 stops whatever runs. A SIGINT that was not queued (a terminal's Ctrl-C,
/// which reaches the cell's process directly) is left to the front end, which decides which cell
/// it was meant for: a second Ctrl-C for a cell that had stopped stopped the next one.
#[test]
fn an_interrupt_meant_for_an_earlier_cell_does_not_stop_the_next() {
    // In a process of its own: the interrupt flag and the SIGINT handler are the process's.
    let name = "an_interrupt_meant_for_an_earlier_cell_does_not_stop_the_next";
    if !own_process::in_own_process(name, &[]) {
        return;
    }
    // As the cell process does (`probe::serve_from_env`), and its answer to the front end's
    // `begin` line.
    placelab::interrupt::install_sigint_handler();
    let begin = |cell: u64| {
        let request = placelab::probe::wire::Request::Begin { cell }.encode();
        let reply = placelab::probe::wire::Reply::parse(&placelab::probe::answer(&request));
        assert_eq!(reply, Some(placelab::probe::wire::Reply::Done));
    };
    // SIGINT naming `cell` (as the front end sends it), or none (as a terminal's Ctrl-C, not
    // queued), to this thread: its handler has run when the call returns.
    let sigint = |cell: Option<u64>| {
        // SAFETY: a signal to this thread, whose handler only touches atomics.
        let sent = unsafe {
            match cell {
                Some(c) => {
                    let value = libc::sigval {
                        sival_ptr: c as usize as *mut libc::c_void,
                    };
                    libc::pthread_sigqueue(libc::pthread_self(), libc::SIGINT, value)
                }
                None => libc::raise(libc::SIGINT),
            }
        };
        assert_eq!(sent, 0);
    };
    begin(5);
    let x = Tensor::ones([3], CPU).unwrap();
    sigint(Some(4));
    assert!(
        !placelab::interrupt::is_requested(),
        "a late SIGINT for cell 4 stopped cell 5"
    );
    assert_eq!((&x + 1.0).unwrap().to_vec::<f32>().unwrap(), vec![2.0; 3]);
    sigint(Some(5));
    assert!(matches!(&x + 1.0, Err(Error::Interrupted)));
    begin(6);
    assert_eq!((&x * 2.0).unwrap().to_vec::<f32>().unwrap(), vec![2.0; 3]);
    sigint(None);
    assert!(
        !placelab::interrupt::is_requested(),
        "a terminal's Ctrl-C stopped a cell the front end did not stop"
    );
    assert_eq!((&x * 2.0).unwrap().to_vec::<f32>().unwrap(), vec![2.0; 3]);
    sigint(Some(0));
    assert!(matches!(&x * 2.0, Err(Error::Interrupted)));
    begin(7);
    assert!(!placelab::interrupt::is_requested());
}
