//! The layers: `Linear` (initialised as PyTorch's), activations, `Dropout`, `Flatten`.

use super::Module;
use crate::base::op::Op;
use crate::device::error::{Error, Result};
use crate::device::layout::IntoShape;
use crate::tensor::{IntoOptions, Tensor, TensorOptions, same_device};

/// `y = x·Wᵀ + b`, with `W: [out, in]` and `b: [out]`. Initialised as `torch.nn.Linear`:
/// both drawn uniformly from ±1/√in (Kaiming-uniform with a = √5).
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A layer from `in_features` to `out_features` on the given device (and dtype, default f32).
    pub fn new(in_features: usize, out_features: usize, opts: impl IntoOptions) -> Result<Linear> {
        Linear::build(in_features, out_features, true, opts)
    }

    /// A layer without a bias.
    pub fn no_bias(
        in_features: usize,
        out_features: usize,
        opts: impl IntoOptions,
    ) -> Result<Linear> {
        Linear::build(in_features, out_features, false, opts)
    }

    fn build(i: usize, o: usize, bias: bool, opts: impl IntoOptions) -> Result<Linear> {
        if i == 0 || o == 0 {
            return Err(Error::invalid(
                "Linear::new",
                format!("in_features ({i}) and out_features ({o}) must be positive"),
            ));
        }
        let opts = opts.into_options();
        let bound = 1.0 / (i as f64).sqrt();
        let uniform = |shape: Vec<usize>| {
            Tensor::rand(shape, opts)?
                .mul(2.0 * bound)?
                .sub(bound)?
                .requires_grad_(true)
        };
        let weight = uniform(vec![o, i])?;
        let bias = if bias { Some(uniform(vec![o])?) } else { None };
        Ok(Linear { weight, bias })
    }

    pub fn in_features(&self) -> usize {
        self.weight.shape()[1]
    }

    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        same_device(Op::Linear, &[("input", x), ("weight", &self.weight)])?;
        let features = x.shape().last().copied().unwrap_or(0);
        if x.rank() == 0 || features != self.in_features() {
            return Err(Error::ShapeMismatch {
                op: Op::Linear.name(),
                lhs: x.shape().to_vec(),
                rhs: self.weight.shape().to_vec(),
                why: format!(
                    "the input's last dimension has {features} features but the layer takes {} (weight is [out, in] = {:?})",
                    self.in_features(),
                    self.weight.shape()
                ),
            });
        }
        let w = self.weight.t()?;
        match &self.bias {
            // As PyTorch's `linear`: the bias joins the GEMM (`addmm`), the leading dims of a
            // batch of sequences folded into rows. Under autocast the whole layer runs in the low
            // precision, bias included.
            Some(b) if x.rank() == 2 => b.addmm(x, &w),
            Some(b) if x.rank() > 2 => {
                // Every leading dim folds into the rows.
                let lead: usize = x.shape()[..x.rank() - 1].iter().product();
                let rows = x.reshape([lead as i64, features as i64])?;
                let mut shape = x.shape().to_vec();
                *shape.last_mut().expect("rank > 2") = self.out_features();
                b.addmm(&rows, &w)?.reshape(shape)
            }
            Some(b) => x.matmul(&w)?.add(
                crate::tensor::autocast::for_matmul(b)?
                    .as_ref()
                    .unwrap_or(b),
            ),
            None => x.matmul(&w),
        }
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        let mut v = vec![("weight".to_string(), self.weight.clone())];
        if let Some(b) = &self.bias {
            v.push(("bias".to_string(), b.clone()));
        }
        v
    }

    fn own_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let mut v = vec![("weight".to_string(), &mut self.weight)];
        if let Some(b) = &mut self.bias {
            v.push(("bias".to_string(), b));
        }
        v
    }

    fn describe(&self) -> String {
        format!(
            "Linear({} → {}{})",
            self.in_features(),
            self.out_features(),
            if self.bias.is_some() { "" } else { ", no bias" }
        )
    }
}

/// `torch.nn.LayerNorm`: normalizes each input over its last dims, `normalized_shape`, to mean
/// 0 and variance 1 (`Tensor::layer_norm`), then scales by `weight` (initialised to ones) and
/// shifts by `bias` (zeros). `eps` is 1e-5 unless `with_eps` sets it.
pub struct LayerNorm {
    pub normalized_shape: Vec<usize>,
    pub eps: f64,
    pub weight: Option<Tensor>,
    pub bias: Option<Tensor>,
}

impl LayerNorm {
    /// A layer norm over `normalized_shape` with a learned weight and bias, on the given device
    /// (and dtype, default f32).
    pub fn new(normalized_shape: impl IntoShape, opts: impl IntoOptions) -> Result<LayerNorm> {
        LayerNorm::build(normalized_shape.into_shape(), true, opts)
    }

    /// One without weight or bias (PyTorch's `elementwise_affine=False`).
    pub fn no_affine(
        normalized_shape: impl IntoShape,
        opts: impl IntoOptions,
    ) -> Result<LayerNorm> {
        LayerNorm::build(normalized_shape.into_shape(), false, opts)
    }

    /// The same layer with `eps` added to the variance.
    pub fn with_eps(mut self, eps: f64) -> LayerNorm {
        self.eps = eps;
        self
    }

    fn build(shape: Vec<usize>, affine: bool, opts: impl IntoOptions) -> Result<LayerNorm> {
        if shape.is_empty() || shape.contains(&0) {
            return Err(Error::invalid(
                "LayerNorm::new",
                format!(
                    "normalized_shape {shape:?} must name at least one dimension, none of size 0; e.g. `[features]`"
                ),
            ));
        }
        let opts = opts.into_options();
        let param = |full: fn(Vec<usize>, TensorOptions) -> Result<Tensor>| {
            full(shape.clone(), opts)?.requires_grad_(true)
        };
        let (weight, bias) = match affine {
            true => (Some(param(Tensor::ones)?), Some(param(Tensor::zeros)?)),
            false => (None, None),
        };
        Ok(LayerNorm {
            normalized_shape: shape,
            eps: 1e-5,
            weight,
            bias,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (w, b) = (self.weight.as_ref(), self.bias.as_ref());
        x.layer_norm(self.normalized_shape.clone(), w, b, self.eps)
    }

    fn own_parameters(&self) -> Vec<(String, Tensor)> {
        let named = [("weight", &self.weight), ("bias", &self.bias)];
        let present = named
            .into_iter()
            .filter_map(|(n, t)| Some((n.to_string(), t.clone()?)));
        present.collect()
    }

    fn own_parameters_mut(&mut self) -> Vec<(String, &mut Tensor)> {
        let named = [("weight", &mut self.weight), ("bias", &mut self.bias)];
        let present = named
            .into_iter()
            .filter_map(|(n, t)| Some((n.to_string(), t.as_mut()?)));
        present.collect()
    }

    fn describe(&self) -> String {
        let affine = if self.weight.is_some() {
            ""
        } else {
            ", no affine"
        };
        format!(
            "LayerNorm({:?}, eps={}{affine})",
            self.normalized_shape, self.eps
        )
    }
}

macro_rules! activation {
    ($name:ident, $method:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Copy, Default)]
        pub struct $name;

        impl Module for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                x.$method()
            }
            fn describe(&self) -> String {
                stringify!($name).to_string()
            }
        }
    };
}
activation!(ReLU, relu, "`max(x, 0)`, element-wise.");
activation!(Sigmoid, sigmoid, "`1 / (1 + e^-x)`, element-wise.");
activation!(Tanh, tanh, "`tanh(x)`, element-wise.");

/// Flattens every dimension after the first (the batch): `[N, 1, 28, 28]` → `[N, 784]`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Flatten;

impl Module for Flatten {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.rank() == 0 {
            return Err(Error::invalid(
                "Flatten",
                "a 0-dimensional tensor has no batch dimension to keep",
            ));
        }
        x.reshape([x.shape()[0] as i64, -1])
    }
    fn describe(&self) -> String {
        "Flatten".into()
    }
}

/// Zeroes each element with probability `p` while training and scales the rest by `1/(1-p)`;
/// passes values through unchanged in evaluation mode.
#[derive(Debug, Clone, Copy)]
pub struct Dropout {
    p: f64,
    training: bool,
}

impl Dropout {
    pub fn new(p: f64) -> Result<Dropout> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::invalid(
                "Dropout::new",
                format!("p = {p} must be in [0, 1]: the probability of zeroing an element"),
            ));
        }
        Ok(Dropout { p, training: true })
    }
}

impl Module for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.training || self.p == 0.0 {
            return Ok(x.clone());
        }
        if self.p == 1.0 {
            // Everything is dropped (PyTorch's special case: no division by 1 − p = 0).
            return x.mul(0.0);
        }
        let keep = Tensor::rand(x.shape(), (x.dtype().to_float(), x.device()))?.ge(self.p)?;
        x.mul(&keep.to_dtype(x.dtype())?)?.div(1.0 - self.p)
    }
    fn set_training(&mut self, training: bool) {
        self.training = training;
    }
    fn is_training(&self) -> bool {
        self.training
    }
    fn describe(&self) -> String {
        format!("Dropout(p={})", self.p)
    }
}
