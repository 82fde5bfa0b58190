//! Replays the PyTorch reference cases of `engine/tests/fixtures/torch_cases.json` (made by
//! `gen_torch_cases.py` with PyTorch on CPU) through the engine on one device, and compares
//! dtype, shape and values. Shared by `torch_reference.rs` and the GPU tests.

use placelab::prelude::*;
use serde_json::Value;

fn dtype_of(name: &str) -> DType {
    DType::ALL
        .into_iter()
        .find(|d| d.name() == name)
        .unwrap_or_else(|| panic!("unknown dtype {name}"))
}

fn number(v: &Value) -> f64 {
    match v {
        Value::String(s) if s == "nan" => f64::NAN,
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        Value::Bool(b) => *b as u8 as f64,
        v => v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")),
    }
}

fn scalar(v: &Value) -> Scalar {
    if let Some(i) = v.as_i64() {
        Scalar::Int(i)
    } else {
        Scalar::Float(number(v))
    }
}

/// A JSON array of sizes (a shape, a model's layer widths).
pub fn sizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap() as usize)
        .collect()
}

fn tensor(v: &Value, device: &Device) -> Tensor {
    let shape = sizes(&v["shape"]);
    let dtype = dtype_of(v["dtype"].as_str().unwrap());
    let data = v["data"].as_array().unwrap();
    let t = match dtype {
        DType::Bool => Tensor::from_vec(
            data.iter().map(|x| x.as_bool().unwrap()).collect(),
            shape,
            device,
        ),
        DType::I64 | DType::I32 | DType::U8 => Tensor::from_vec(
            data.iter().map(|x| x.as_i64().unwrap()).collect(),
            shape,
            device,
        )
        .and_then(|t| t.to_dtype(dtype)),
        _ => Tensor::from_vec(data.iter().map(number).collect::<Vec<f64>>(), shape, device)
            .and_then(|t| t.to_dtype(dtype)),
    };
    t.unwrap()
}

fn dims(v: &Value) -> Option<Vec<i64>> {
    v.as_array()
        .map(|a| a.iter().map(|d| d.as_i64().unwrap()).collect())
}

fn apply(op: &str, args: &Value, inputs: &[Tensor]) -> Result<Tensor> {
    let x = &inputs[0];
    let int = |k: &str| args[k].as_i64().unwrap();
    let keepdim = || args["keepdim"].as_bool().unwrap_or(false);
    match op {
        "add" => x.add(&inputs[1]),
        "sub" => x.sub(&inputs[1]),
        "mul" => x.mul(&inputs[1]),
        "div" => x.div(&inputs[1]),
        "pow" => x.pow(&inputs[1]),
        "maximum" => x.maximum(&inputs[1]),
        "minimum" => x.minimum(&inputs[1]),
        "eq" => x.eq(&inputs[1]),
        "ne" => x.ne(&inputs[1]),
        "lt" => x.lt(&inputs[1]),
        "le" => x.le(&inputs[1]),
        "gt" => x.gt(&inputs[1]),
        "ge" => x.ge(&inputs[1]),
        "scalar" => {
            // A Rust number as the right-hand side, or on the left through the r-methods.
            let (rev, sc) = (args["reverse"].as_bool().unwrap(), scalar(&args["scalar"]));
            match (args["scalar_op"].as_str().unwrap(), sc, rev) {
                ("add", Scalar::Int(i), _) => x.add(i),
                ("add", Scalar::Float(f), _) => x.add(f),
                ("mul", Scalar::Int(i), _) => x.mul(i),
                ("mul", Scalar::Float(f), _) => x.mul(f),
                ("sub", Scalar::Int(i), false) => x.sub(i),
                ("sub", Scalar::Float(f), false) => x.sub(f),
                ("sub", Scalar::Int(i), true) => x.rsub(i),
                ("sub", Scalar::Float(f), true) => x.rsub(f),
                ("div", Scalar::Int(i), false) => x.div(i),
                ("div", Scalar::Float(f), false) => x.div(f),
                ("div", Scalar::Int(i), true) => x.rdiv(i),
                ("div", Scalar::Float(f), true) => x.rdiv(f),
                ("pow", Scalar::Int(i), false) => x.pow(i),
                ("pow", Scalar::Float(f), false) => x.pow(f),
                ("pow", Scalar::Int(i), true) => x.rpow(i),
                ("pow", Scalar::Float(f), true) => x.rpow(f),
                other => panic!("unhandled scalar case {other:?}"),
            }
        }
        "neg" => x.neg(),
        "exp" => x.exp(),
        "log" => x.log(),
        "sqrt" => x.sqrt(),
        "abs" => x.abs(),
        "relu" => x.relu(),
        "sigmoid" => x.sigmoid(),
        "tanh" => x.tanh(),
        "gelu" => x.gelu(),
        "clamp" => x.clamp(
            args.get("min").filter(|v| !v.is_null()).map(scalar),
            args.get("max").filter(|v| !v.is_null()).map(scalar),
        ),
        "where" => Tensor::where_cond(x, &inputs[1], &inputs[2]),
        "sum" | "mean" | "max" | "min" => match (
            op,
            dims(&args["dims"]).or_else(|| keepdim().then(|| (0..x.rank() as i64).collect())),
        ) {
            ("sum", None) => x.sum_all(),
            ("mean", None) => x.mean_all(),
            ("max", None) => x.max_all(),
            ("min", None) => x.min_all(),
            ("sum", Some(d)) => x.sum(d, keepdim()),
            ("mean", Some(d)) => x.mean(d, keepdim()),
            ("max", Some(d)) => x.max(d, keepdim()),
            (_, Some(d)) => x.min(d, keepdim()),
            _ => unreachable!(),
        },
        "argmax" | "argmin" => match (op, args["dim"].as_i64()) {
            ("argmax", None) => x.argmax_all(),
            ("argmin", None) => x.argmin_all(),
            ("argmax", Some(d)) => x.argmax(d, keepdim()),
            (_, Some(d)) => x.argmin(d, keepdim()),
            _ => unreachable!(),
        },
        "matmul" => x.matmul(&inputs[1]),
        "softmax" => x.softmax(int("dim")),
        "log_softmax" => x.log_softmax(int("dim")),
        "to_dtype" => x.to_dtype(dtype_of(args["dtype"].as_str().unwrap())),
        "reshape" => x.reshape(dims(&args["shape"]).unwrap()),
        "transpose" => x.transpose(int("dim0"), int("dim1")),
        "permute" => x.permute(dims(&args["dims"]).unwrap()),
        "narrow" => x.narrow(int("dim"), int("start") as usize, int("length") as usize),
        "squeeze" => match args["dim"].as_i64() {
            Some(d) => x.squeeze(d),
            None => x.squeeze_all(),
        },
        "unsqueeze" => x.unsqueeze(int("dim")),
        "cat" => Tensor::cat(&inputs.iter().collect::<Vec<_>>(), int("dim")),
        "stack" => Tensor::stack(&inputs.iter().collect::<Vec<_>>(), int("dim")),
        "index_select" => x.index_select(int("dim"), &inputs[1]),
        "flatten" => x.flatten(),
        "chain" => {
            let mut t = x.clone();
            for step in args["steps"].as_array().unwrap() {
                t = apply(step["op"].as_str().unwrap(), step, &[t])?;
            }
            Ok(t)
        }
        other => panic!("the fixture has an op the test does not know: {other}"),
    }
}

fn close(got: f64, want: f64, dtype: DType) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() {
        return got == want;
    }
    let (rtol, atol) = match dtype {
        DType::F64 => (1e-10, 1e-12),
        DType::F32 => (2e-5, 1e-6),
        DType::F16 => (2e-3, 1e-3),
        DType::BF16 => (1.6e-2, 1e-2),
        _ => (0.0, 0.0),
    };
    (got - want).abs() <= atol + rtol * want.abs()
}

pub fn replay(device: &Device) -> usize {
    // From the working directory when there (a test binary carried to a GPU machine runs in
    // its own copy of the repository, from its root), else from the source tree it was built in.
    let local = std::path::Path::new("engine/tests/fixtures/torch_cases.json");
    let path = if local.exists() {
        local.to_path_buf()
    } else {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch_cases.json")
    };
    let text = std::fs::read_to_string(path).unwrap();
    let fixture: Value = serde_json::from_str(&text).unwrap();
    let mut failures = Vec::new();
    let cases = fixture["cases"].as_array().unwrap();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let inputs: Vec<Tensor> = case["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| tensor(v, device))
            .collect();
        let want = tensor(&case["output"], &Device::Cpu);
        let result = apply(case["op"].as_str().unwrap(), &case["args"], &inputs);
        if case["op"] == "matmul" && device.is_cuda() && !inputs[0].dtype().is_float() {
            // PyTorch's CUDA matmul (cuBLAS) takes floats only; so do real and simulated GPUs.
            match result {
                Err(Error::UnsupportedDType { op: "matmul", .. }) => {}
                other => failures.push(format!(
                    "{name}: integer matmul on {device} should be refused, got {other:?}"
                )),
            }
            continue;
        }
        let got = match result {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: error {e}"));
                continue;
            }
        };
        if got.device() != *device {
            failures.push(format!(
                "{name}: result on {} instead of {device}",
                got.device()
            ));
        }
        if got.dtype() != want.dtype() || got.shape() != want.shape() {
            failures.push(format!(
                "{name}: got {}{:?}, want {}{:?}",
                got.dtype(),
                got.shape(),
                want.dtype(),
                want.shape()
            ));
            continue;
        }
        let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
        if let Some(i) = (0..w.len()).find(|&i| !close(g[i], w[i], want.dtype())) {
            failures.push(format!(
                "{name}: element {i} is {} but PyTorch gives {}",
                g[i], w[i]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from PyTorch on {device}:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    cases.len()
}
