//! Tensors big enough to take the parallel and tiled kernel paths, checked against plain loops.

use placelab::prelude::*;

#[test]
fn transposed_copies_match_index_arithmetic() {
    let (b, r, c) = (3, 700, 301);
    let x = Tensor::arange(0, (b * r * c) as i64, Device::Cpu)
        .unwrap()
        .reshape([b, r, c])
        .unwrap();
    let t = x.transpose(1, 2).unwrap().contiguous().unwrap(); // [b, c, r]
    let v = t.to_vec::<i64>().unwrap();
    for (bi, ci, ri) in [
        (0, 0, 0),
        (1, 17, 33),
        (2, 300, 699),
        (2, 31, 32),
        (1, 300, 0),
    ] {
        assert_eq!(v[(bi * c + ci) * r + ri], ((bi * r + ri) * c + ci) as i64);
    }
    let f = x
        .to_dtype(DType::F32)
        .unwrap()
        .permute([2, 0, 1])
        .unwrap()
        .contiguous()
        .unwrap();
    assert_eq!(
        f.to_vec::<f32>().unwrap()[(5 * b + 1) * r + 9],
        ((r + 9) * c + 5) as f32
    );
}

#[test]
fn large_elementwise_and_reductions_match_f64_loops() {
    manual_seed(3);
    let n = 1_000_003;
    let a = Tensor::randn([n], Device::Cpu).unwrap();
    let b = Tensor::randn([n], Device::Cpu).unwrap();
    let (va, vb) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    let s = (&a + &b).unwrap().to_vec::<f32>().unwrap();
    assert!((0..n).all(|i| s[i] == va[i] + vb[i]));
    let want: f64 = va.iter().map(|&v| v as f64).sum();
    let got = a.sum_all().unwrap().item::<f32>().unwrap() as f64;
    assert!((got - want).abs() < 1e-6 * n as f64, "{got} vs {want}");
    let e = a.exp().unwrap().to_vec::<f32>().unwrap();
    assert!(
        (0..n)
            .step_by(997)
            .all(|i| ((e[i] - va[i].exp()) / va[i].exp()).abs() < 1e-6)
    );
    let (m, i) = a.max_dim(0, false).unwrap();
    let best = va.iter().cloned().fold(f32::MIN, f32::max);
    assert_eq!(
        (
            m.item::<f32>().unwrap(),
            va[i.item::<i64>().unwrap() as usize]
        ),
        (best, best)
    );
}

#[test]
fn softmax_rows_sum_to_one_and_match_the_formula() {
    let x = Tensor::randn([64, 3000], Device::Cpu).unwrap();
    let s = x.softmax(1).unwrap();
    let rows = s.sum(1, false).unwrap().to_vec::<f32>().unwrap();
    assert!(rows.iter().all(|r| (r - 1.0).abs() < 1e-5), "{rows:?}");
    let xv = x.to_vec2::<f32>().unwrap()[5].clone();
    let m = xv.iter().cloned().fold(f32::MIN, f32::max) as f64;
    let z: f64 = xv.iter().map(|&v| (v as f64 - m).exp()).sum();
    let want = ((xv[123] as f64 - m).exp() / z) as f32;
    assert!((s.to_vec2::<f32>().unwrap()[5][123] - want).abs() < 1e-6);
    let ls = x
        .log_softmax(0)
        .unwrap()
        .exp()
        .unwrap()
        .sum(0, false)
        .unwrap();
    assert!(
        ls.to_vec::<f32>()
            .unwrap()
            .iter()
            .all(|r| (r - 1.0).abs() < 1e-4)
    );
}
