use super::*;

fn moments<T: Copy + Into<f64>>(a: &[T]) -> [f64; 4] {
    let n = a.len() as f64;
    let mean = a.iter().map(|&v| v.into()).sum::<f64>() / n;
    let m = |k: i32| a.iter().map(|&v| (v.into() - mean).powi(k)).sum::<f64>() / n;
    [mean, m(2), m(3), m(4)]
}

/// Element `i` of a fill, computed alone from its definition (the module's doc).
fn value_at<T: Sample>(i: usize, seed: u64, normal: bool) -> T {
    let (batch, k) = (i / (LANES * T::PER_GROUP), i % (LANES * T::PER_GROUP));
    let g = (batch * LANES + k % LANES) as u64;
    let block = philox::philox([g as u32, (g >> 32) as u32, 0, 0], seed);
    let words: [[u32; LANES]; 4] = std::array::from_fn(|j| [block[j]; LANES]);
    let h = T::draw(&words, 0, k / LANES);
    match (normal, T::fast(h)) {
        (false, _) => T::uniform(h),
        (true, (v, true)) => v,
        (true, _) => {
            let first = philox::philox([i as u32, (i >> 32) as u32, 1, 0], seed);
            finish::<T>(h, i as u64, seed, first)
        }
    }
}

#[test]
fn each_value_depends_on_the_seed_and_its_index_only() {
    // Several pieces, drawn in parallel, and a ragged end.
    let n = 3 * BLOCK + 17;
    for normal in [true, false] {
        let mut a = vec![0.0f32; n];
        fill(&mut a, 42, normal);
        assert!((0..n).all(|i| a[i].to_bits() == value_at::<f32>(i, 42, normal).to_bits()));
        let mut b = vec![0.0f64; n];
        fill(&mut b, 42, normal);
        assert!((0..n).all(|i| b[i].to_bits() == value_at::<f64>(i, 42, normal).to_bits()));
        let mut c = vec![0.0f32; n];
        fill(&mut c, 43, normal);
        assert_ne!(a, c);
    }
    // Every vector width's copy draws the same bits.
    for width in simd::WIDTHS {
        if simd::missing_features(width).is_empty() {
            let mut w = vec![0.0f32; 5000];
            fill_piece_at(width, 0, &mut w, 42, true);
            assert!(
                (0..5000).all(|i| w[i] == value_at::<f32>(i, 42, true)),
                "the {width}-bit copy"
            );
        }
    }
    // A prefix of a longer fill is the shorter fill.
    let (mut short, mut long) = (vec![0.0f32; 1001], vec![0.0f32; 5000]);
    fill(&mut short, 7, true);
    fill(&mut long, 7, true);
    assert_eq!(short[..], long[..1001]);
}

fn assert_standard_normal<T: Copy + Into<f64>>(a: &[T]) {
    let n = a.len() as f64;
    let [mean, var, skew, kurt] = moments(a);
    // Standard errors at n = 4M: mean 5e-4, variance 7e-4, skew 1.2e-3, kurtosis 2.4e-3.
    assert!(mean.abs() < 3e-3, "mean {mean}");
    assert!((var - 1.0).abs() < 5e-3, "variance {var}");
    assert!((skew / var.powf(1.5)).abs() < 1e-2, "skew {skew}");
    assert!((kurt / (var * var) - 3.0).abs() < 3e-2, "kurtosis {kurt}");
    // The normal's CDF at a few points, and the tail, which starts at the ziggurat's 3.65.
    for (z, p) in [
        (-2.0, 0.02275),
        (-1.0, 0.158655),
        (0.0, 0.5),
        (0.5, 0.691462),
    ] {
        let got = a.iter().filter(|&&v| v.into() < z).count() as f64 / n;
        assert!((got - p).abs() < 2e-3, "P(x < {z}) = {got}, want {p}");
    }
    let tail = a.iter().filter(|&&v| v.into().abs() > 3.5).count() as f64 / n;
    assert!((tail - 4.6525e-4).abs() < 6e-5, "P(|x| > 3.5) = {tail}");
    let far = a.iter().filter(|&&v| v.into().abs() > 3.8).count() as f64 / n;
    assert!((far - 1.4470e-4).abs() < 3e-5, "P(|x| > 3.8) = {far}");
    assert!(a.iter().all(|&v| v.into().is_finite()));
}

#[test]
fn the_ziggurat_draws_a_standard_normal_in_f32_and_f64() {
    let n = 4_000_000;
    let mut a = vec![0.0f32; n];
    fill(&mut a, 7, true);
    assert_standard_normal(&a);
    let mut b = vec![0.0f64; n];
    fill(&mut b, 7, true);
    assert_standard_normal(&b);
}

#[test]
fn uniforms_fill_zero_to_one() {
    let n = 1_000_003;
    let mut a = vec![0.0f32; n];
    fill(&mut a, 9, false);
    let mut b = vec![0.0f64; n];
    fill(&mut b, 9, false);
    assert!(a.iter().all(|&v| (0.0..1.0).contains(&v)));
    assert!(b.iter().all(|&v| (0.0..1.0).contains(&v)));
    for [mean, var, ..] in [moments(&a), moments(&b)] {
        assert!((mean - 0.5).abs() < 2e-3 && (var - 1.0 / 12.0).abs() < 1e-3);
    }
    let low = a.iter().filter(|&&v| v < 0.1).count() as f64 / n as f64;
    assert!((low - 0.1).abs() < 2e-3, "{low}");
}

#[test]
fn integers_cover_their_range_evenly_and_the_extremes_work() {
    let n = 600_000;
    let mut a = vec![0i64; n];
    fill_int(&mut a, 3, -3, 3);
    let mut counts = [0usize; 6];
    for &v in &a {
        counts[(v + 3) as usize] += 1;
    }
    // Each of six values 100,000 times; the standard error is about 290.
    assert!(
        counts.iter().all(|&c| c.abs_diff(n / 6) < 1500),
        "{counts:?}"
    );
    // The widest range there is: no overflow, both signs.
    let mut wide = vec![0i64; 1000];
    fill_int(&mut wide, 4, i64::MIN, i64::MAX);
    assert!(wide.iter().any(|&v| v < 0) && wide.iter().any(|&v| v > 0));
    assert!(wide.iter().all(|&v| v != i64::MAX));
}
