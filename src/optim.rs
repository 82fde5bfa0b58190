//! Optimizers with PyTorch's update rules. Their state (momentum, moments) is created beside
//! each parameter, on its device; steps update the parameters in place under `no_grad`.

use crate::autograd::no_grad;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

pub trait Optimizer {
    /// Updates every parameter that has a gradient.
    fn step(&mut self) -> Result<()>;

    /// The parameters this optimizer updates.
    fn params(&self) -> &[Tensor];

    /// The learning rate (schedulers and `GradScaler` read it).
    fn lr(&self) -> f64;

    fn set_lr(&mut self, lr: f64);

    /// The state the optimizer keeps between steps (momentum buffers, Adam's two moments): made
    /// at the first step, beside each parameter, on its device (`optimizer.state` in PyTorch).
    fn state(&self) -> Vec<Tensor> {
        Vec::new()
    }

    /// Clears every parameter's gradient.
    fn zero_grad(&self) {
        let _phase = crate::profile::phase(crate::profile::Phase::Optimizer);
        for p in self.params() {
            p.zero_grad();
        }
    }
}

/// Fails when no parameter has a gradient: almost always a forgotten `backward()`, or a model
/// moved with `.to()` after the optimizer was made (it still holds the old parameters).
fn check_grads(op: &'static str, params: &[Tensor]) -> Result<()> {
    if !params.is_empty() && params.iter().all(|p| p.grad().is_none()) {
        return Err(Error::invalid(
            op,
            "no parameter has a gradient: call `loss.backward()?` before `step()`, and make the optimizer after moving the model (`model.to(&device)?` replaces its parameters)",
        ));
    }
    Ok(())
}

fn check_lr(op: &'static str, lr: f64) -> Result<()> {
    if !(lr.is_finite() && lr >= 0.0) {
        return Err(Error::invalid(
            op,
            format!("the learning rate must be a finite number ≥ 0, got {lr}"),
        ));
    }
    Ok(())
}

/// Stochastic gradient descent with optional momentum, dampening, weight decay and Nesterov
/// momentum — `torch.optim.SGD`.
pub struct Sgd {
    params: Vec<Tensor>,
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
    buffers: Vec<Option<Tensor>>,
}

impl Sgd {
    pub fn new(params: Vec<Tensor>, lr: f64) -> Result<Sgd> {
        check_lr("Sgd::new", lr)?;
        let n = params.len();
        Ok(Sgd {
            params,
            lr,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            buffers: vec![None; n],
        })
    }

    pub fn momentum(mut self, momentum: f64) -> Self {
        self.momentum = momentum;
        self
    }

    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = weight_decay;
        self
    }

    pub fn nesterov(mut self, nesterov: bool) -> Self {
        self.nesterov = nesterov;
        self
    }

    pub fn dampening(mut self, dampening: f64) -> Self {
        self.dampening = dampening;
        self
    }
}

impl Optimizer for Sgd {
    fn step(&mut self) -> Result<()> {
        let _phase = crate::profile::phase(crate::profile::Phase::Optimizer);
        check_grads("Sgd::step", &self.params)?;
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::invalid(
                "Sgd::step",
                "Nesterov momentum needs momentum > 0 and dampening 0",
            ));
        }
        no_grad(|| {
            for (p, buf) in self.params.iter().zip(&mut self.buffers) {
                let Some(mut g) = p.grad() else { continue };
                if self.weight_decay != 0.0 {
                    g = g.add(&p.mul(self.weight_decay)?)?;
                }
                if self.momentum != 0.0 {
                    let b = match buf.take() {
                        None => g.copy()?,
                        Some(b) => b.mul(self.momentum)?.add(&g.mul(1.0 - self.dampening)?)?,
                    };
                    g = if self.nesterov {
                        g.add(&b.mul(self.momentum)?)?
                    } else {
                        b.clone()
                    };
                    *buf = Some(b);
                }
                p.add_scaled_(&g, -self.lr)?;
            }
            Ok(())
        })
    }

    fn params(&self) -> &[Tensor] {
        &self.params
    }

    fn state(&self) -> Vec<Tensor> {
        self.buffers.iter().flatten().cloned().collect()
    }

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
}

/// Adam (`torch.optim.Adam`), or AdamW with decoupled weight decay (`Adam::adamw`).
pub struct Adam {
    params: Vec<Tensor>,
    pub lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    pub weight_decay: f64,
    decoupled: bool,
    step: u64,
    moments: Vec<Option<(Tensor, Tensor)>>,
}

impl Adam {
    /// Adam with PyTorch's defaults (betas 0.9, 0.999; eps 1e-8; no weight decay).
    pub fn new(params: Vec<Tensor>, lr: f64) -> Result<Adam> {
        check_lr("Adam::new", lr)?;
        let n = params.len();
        Ok(Adam {
            params,
            lr,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
            step: 0,
            moments: vec![None; n],
        })
    }

    /// AdamW: weight decay applied to the weights directly (default 0.01, as PyTorch's).
    pub fn adamw(params: Vec<Tensor>, lr: f64) -> Result<Adam> {
        Ok(Adam {
            decoupled: true,
            weight_decay: 0.01,
            ..Adam::new(params, lr)?
        })
    }

    pub fn betas(mut self, b1: f64, b2: f64) -> Self {
        self.betas = (b1, b2);
        self
    }

    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = weight_decay;
        self
    }

    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }
}

impl Optimizer for Adam {
    fn step(&mut self) -> Result<()> {
        let _phase = crate::profile::phase(crate::profile::Phase::Optimizer);
        check_grads("Adam::step", &self.params)?;
        self.step += 1;
        let (b1, b2) = self.betas;
        let t = self.step as i32;
        let (c1, c2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
        no_grad(|| {
            for (p, state) in self.params.iter().zip(&mut self.moments) {
                let Some(mut g) = p.grad() else { continue };
                let mut w = p.clone();
                if self.weight_decay != 0.0 {
                    if self.decoupled {
                        w = w.mul(1.0 - self.lr * self.weight_decay)?;
                    } else {
                        g = g.add(&p.mul(self.weight_decay)?)?;
                    }
                }
                let (m, v) = match state.take() {
                    Some(s) => s,
                    None => (g.zeros_like()?, g.zeros_like()?),
                };
                let m = m.mul(b1)?.add(&g.mul(1.0 - b1)?)?;
                let v = v.mul(b2)?.add(&g.mul(&g)?.mul(1.0 - b2)?)?;
                let denom = v.div(c2)?.sqrt()?.add(self.eps)?;
                let update = m.div(c1)?.div(&denom)?.mul(self.lr)?;
                p.assign_(&w.sub(&update)?)?;
                *state = Some((m, v));
            }
            Ok(())
        })
    }

    fn params(&self) -> &[Tensor] {
        &self.params
    }

    fn state(&self) -> Vec<Tensor> {
        self.moments
            .iter()
            .flatten()
            .flat_map(|(m, v)| [m.clone(), v.clone()])
            .collect()
    }

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
}
