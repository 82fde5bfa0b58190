//! The kernel paths that start above the sizes the property test draws: sums over leading dims
//! in blocks of 4096 rows, matrix products split by rows over threads, the optimizer's in-place
//! update, long softmax rows, tiled transposes. Each against f64 loops written here.

use placelab::prelude::*;

use super::stand_in;

fn close_all(got: &[f64], want: &[f64], rel: f64) -> std::result::Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} values, expected {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_finite() {
            g.is_finite() && (g - w).abs() <= rel * w.abs().max(1.0)
        } else {
            g == w || (g.is_nan() && w.is_nan())
        };
        if !ok {
            return Err(format!("[{i}] = {g}, expected {w}"));
        }
    }
    Ok(())
}

#[test]
fn sums_over_leading_dims_match_f64_loops() {
    for device in [Device::Cpu, Device::Cuda(0)] {
        if device.is_cuda() {
            stand_in::gpus(2, None).unwrap();
        }
        for shape in [
            vec![5000, 3],
            vec![64, 128],
            vec![9000, 1],
            vec![0, 4],
            vec![70, 3, 5],
        ] {
            let x = Tensor::randn(shape.clone(), device).unwrap();
            let v = x.to_f64_vec().unwrap();
            let kept: usize = shape[1..].iter().product();
            let rows = shape[0];
            let mut want = vec![0.0; kept];
            for r in 0..rows {
                for c in 0..kept {
                    want[c] += v[r * kept + c];
                }
            }
            let got = x.sum(0, false).unwrap();
            assert_eq!(got.shape(), &shape[1..], "{shape:?} on {device}");
            close_all(&got.to_f64_vec().unwrap(), &want, 1e-5)
                .unwrap_or_else(|e| panic!("sum over dim 0 of {shape:?} on {device}: {e}"));
            let mean: Vec<f64> = want.iter().map(|s| s / rows as f64).collect();
            let got = x.mean(0, true).unwrap().to_f64_vec().unwrap();
            close_all(&got, &mean, 1e-5).unwrap_or_else(|e| panic!("mean of {shape:?}: {e}"));
        }
        // Over the two leading dims of a 3-D tensor, as a bias gradient of a batched layer.
        let x = Tensor::randn([70, 3, 5], device).unwrap();
        let v = x.to_f64_vec().unwrap();
        let want: Vec<f64> = (0..5)
            .map(|c| (0..210).map(|r| v[r * 5 + c]).sum())
            .collect();
        let got = x.sum(&[0i64, 1][..], false).unwrap().to_f64_vec().unwrap();
        close_all(&got, &want, 1e-5).unwrap();
        // Integers wrap as PyTorch's do; NaN and infinities propagate down their column.
        let big = Tensor::from_vec(vec![i64::MAX, 1, 1, 2], [2, 2], device).unwrap();
        assert_eq!(
            big.sum(0, false).unwrap().to_vec::<i64>().unwrap(),
            [i64::MIN, 3]
        );
        let odd = Tensor::from_vec(
            vec![f32::NAN, 1.0, f32::INFINITY, 2.0, 3.0, f32::NEG_INFINITY],
            [2, 3],
            device,
        )
        .unwrap();
        let s = odd.sum(0, false).unwrap().to_vec::<f32>().unwrap();
        assert!(s[0].is_nan() && s[1] == 4.0 && s[2].is_nan(), "{s:?}");
    }
}

fn matmul_f64(a: &[f64], b: &[f64], (m, n, k): (usize, usize, usize)) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                out[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    out
}

#[test]
fn products_split_over_threads_match_f64_loops() {
    let cpu = Device::Cpu;
    // Row counts that do and do not divide by the thread count, operands plain and transposed.
    for (m, n, k) in [
        (100, 50, 300),
        (33, 257, 129),
        (1, 4096, 512),
        (257, 3, 2000),
    ] {
        let a = Tensor::randn([m, k], cpu).unwrap();
        let b = Tensor::randn([k, n], cpu).unwrap();
        let want = matmul_f64(
            &a.to_f64_vec().unwrap(),
            &b.to_f64_vec().unwrap(),
            (m, n, k),
        );
        let plain = a.matmul(&b).unwrap().to_f64_vec().unwrap();
        close_all(&plain, &want, 1e-4).unwrap_or_else(|e| panic!("{m}×{k}·{k}×{n}: {e}"));
        let at = a.t().unwrap().contiguous().unwrap().t().unwrap();
        let bt = b.t().unwrap().contiguous().unwrap().t().unwrap();
        let strided = at.matmul(&bt).unwrap().to_f64_vec().unwrap();
        close_all(&strided, &want, 1e-4).unwrap_or_else(|e| panic!("transposed {m}×{k}: {e}"));
    }
    // A batch of products, each above the split threshold, and a broadcast right-hand side.
    let a = Tensor::randn([3, 64, 200], cpu).unwrap();
    let b = Tensor::randn([200, 100], cpu).unwrap();
    let (av, bv) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    let got = a.matmul(&b).unwrap().to_f64_vec().unwrap();
    for i in 0..3 {
        let want = matmul_f64(&av[i * 64 * 200..(i + 1) * 64 * 200], &bv, (64, 100, 200));
        close_all(&got[i * 6400..(i + 1) * 6400], &want, 1e-4).unwrap();
    }
}

#[test]
fn in_place_updates_equal_the_out_of_place_arithmetic() {
    // `add_scaled_` (the optimizers' update) on a contiguous parameter, a transposed one (the
    // out-of-place fallback) and f64, bit for bit against `p + alpha·g`.
    for (shape, dtype) in [([300, 700], DType::F32), ([7, 5], DType::F64)] {
        let p = Tensor::randn(shape, dtype).unwrap();
        let g = Tensor::randn(shape, dtype).unwrap();
        let want = p.add(g.mul(-0.01).unwrap()).unwrap().to_f64_vec().unwrap();
        p.add_scaled_(&g, -0.01).unwrap();
        assert_eq!(p.to_f64_vec().unwrap(), want, "{shape:?} {dtype}");
        let pt = Tensor::randn([shape[1], shape[0]], dtype)
            .unwrap()
            .t()
            .unwrap();
        let want = pt.add(g.mul(0.5).unwrap()).unwrap().to_f64_vec().unwrap();
        pt.add_scaled_(&g, 0.5).unwrap();
        assert_eq!(pt.to_f64_vec().unwrap(), want, "transposed {shape:?}");
    }
    let p = Tensor::zeros([2, 2], ()).unwrap();
    assert!(p.add_scaled_(&Tensor::ones([3], ()).unwrap(), 1.0).is_err());
}

#[test]
fn softmax_rows_match_f64_within_f32_rounding() {
    // Long rows (the vectorised path, summed in runs of 1024 and a ragged tail), values spread
    // over ±80, a masked (-inf) entry, an all -inf row (NaN, as PyTorch gives) and a NaN row.
    let (rows, len) = (37, 2059);
    let mut v: Vec<f32> = Tensor::randn([rows * len], ())
        .unwrap()
        .mul(30.0)
        .unwrap()
        .to_vec()
        .unwrap();
    v[5] = f32::NEG_INFINITY;
    v[len..2 * len].fill(f32::NEG_INFINITY);
    v[2 * len + 7] = f32::NAN;
    let x = Tensor::from_vec(v.clone(), [rows, len], ()).unwrap();
    for log in [false, true] {
        let got = if log { x.log_softmax(1) } else { x.softmax(1) };
        let got = got.unwrap().to_vec::<f32>().unwrap();
        for r in 0..rows {
            let row: Vec<f64> = v[r * len..(r + 1) * len]
                .iter()
                .map(|&x| x as f64)
                .collect();
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|x| (x - m).exp()).sum();
            for c in 0..len {
                let g = got[r * len + c] as f64;
                let want = if log {
                    row[c] - m - sum.ln()
                } else {
                    (row[c] - m).exp() / sum
                };
                if r == 1 || r == 2 {
                    assert!(g.is_nan(), "row {r} (all -inf or NaN) gives NaN, got {g}");
                    continue;
                }
                // log-softmax subtracts numbers of the inputs' size: its error is absolute.
                let tol = if log {
                    1e-6 * (1.0 + (row[c] - m).abs())
                } else {
                    1e-5 * want.abs() + 1e-37
                };
                let ok = (g - want).abs() <= tol || (want.is_infinite() && g == want);
                assert!(ok, "log={log} [{r}, {c}] = {g}, expected {want}");
            }
        }
    }
}

#[test]
fn transposed_copies_put_every_element_in_place() {
    // Tiles of 32 rows in 8×8 blocks, partial tiles, ragged columns, a batch dim, and a cast on
    // the way (`to_dtype` of a transposed view walks the same path).
    for (batch, rows, cols) in [
        (1, 64, 2048),
        (1, 70, 45),
        (3, 40, 33),
        (2, 32, 8),
        (1, 5, 3),
    ] {
        let x = Tensor::randn([batch, rows, cols], ()).unwrap();
        let v = x.to_vec::<f32>().unwrap();
        let t = x.transpose(1, 2).unwrap();
        let got = t.contiguous().unwrap().to_vec::<f32>().unwrap();
        let half = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        for b in 0..batch {
            for c in 0..cols {
                for r in 0..rows {
                    let want = v[(b * rows + r) * cols + c];
                    let at = (b * cols + c) * rows + r;
                    assert_eq!(got[at], want, "[{b}, {c}, {r}] of {batch}×{rows}×{cols}ᵀ");
                    assert_eq!(half[at], want as f64);
                }
            }
        }
    }
}
