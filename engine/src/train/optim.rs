//! Optimizers with PyTorch's update rules. Their state (momentum, moments) is created beside
//! each parameter, on its device, at the first step. A step updates the parameters and the state
//! in place, all of one device and dtype at once, as PyTorch's `foreach` implementation: on a GPU
//! one launch per 24 tensors, and no parameter-sized temporary anywhere.
//!
//! Each element is computed as these out-of-place ops would compute it (rounding each result to
//! the parameter's dtype, f32 for f16/bf16), the formulas of `kernels/optim.cu`:
//! SGD: `d = g + wd·p`; `b = d` (first step) or `momentum·b + (1 − dampening)·d`; `d = b` (or
//! `d + momentum·b`, Nesterov); `p = p + (−lr)·d`.
//! Adam: `g = g + wd·p` (or `w = p·(1 − lr·wd)`, AdamW); `m = β₁·m + (1 − β₁)·g`;
//! `v = β₂·v + (g·g)·(1 − β₂)`; `p = w − ((m / c₁) / (√(v / c₂) + eps))·lr`.

use std::collections::BTreeMap;

use crate::base::dtype::DType;
use crate::base::op::Update;
use crate::device::Device;
use crate::device::error::{Error, Result};
use crate::tensor::Tensor;
use crate::tensor::update::{ParamUpdate, apply_update};

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
    /// Each parameter's momentum buffer (the second slot is unused).
    buffers: Vec<[Option<Tensor>; 2]>,
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
            buffers: vec![[None, None]; n],
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
        let update = Update::Sgd {
            lr: self.lr,
            momentum: self.momentum,
            dampening: self.dampening,
            weight_decay: self.weight_decay,
            nesterov: self.nesterov,
        };
        let states = self.buffers.iter_mut().map(|[b, unused]| [b, unused]);
        update_in_place(&update, &self.params, states)
    }

    fn params(&self) -> &[Tensor] {
        &self.params
    }

    fn state(&self) -> Vec<Tensor> {
        self.buffers.iter().flatten().flatten().cloned().collect()
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
    moments: Vec<[Option<Tensor>; 2]>,
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
            moments: vec![[None, None]; n],
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
        // Counted once the step has run: a refused step leaves the bias corrections as they were.
        let t = (self.step + 1) as i32;
        let (b1, b2) = self.betas;
        let (c1, c2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
        let update = Update::Adam {
            lr: self.lr,
            betas: self.betas,
            eps: self.eps,
            weight_decay: self.weight_decay,
            decoupled: self.decoupled,
            corrections: (c1, c2),
        };
        let states = self.moments.iter_mut().map(|[m, v]| [m, v]);
        update_in_place(&update, &self.params, states)?;
        self.step += 1;
        Ok(())
    }

    fn params(&self) -> &[Tensor] {
        &self.params
    }

    fn state(&self) -> Vec<Tensor> {
        self.moments.iter().flatten().flatten().cloned().collect()
    }

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }
}

/// One parameter of an update: itself, its gradient, its state, whether the state is new, and
/// the optimizer's slots the state goes to once the update has written it.
struct Member<'a> {
    param: Tensor,
    grad: Tensor,
    state: [Option<Tensor>; 2],
    first: bool,
    slots: [&'a mut Option<Tensor>; 2],
}

/// Updates every parameter that has a gradient, in place, with `update`: its state (one slot per
/// `update.state_count()`) made beside it at its first update. Parameters are grouped by device
/// and dtype, each group one call to the backend. Every parameter is checked before anything is
/// made or written, and new state joins the optimizer only once its group's update has written
/// it: a failed step never leaves state that the next step would read unwritten.
fn update_in_place<'a>(
    update: &Update,
    params: &[Tensor],
    states: impl Iterator<Item = [&'a mut Option<Tensor>; 2]>,
) -> Result<()> {
    let with_grads: Vec<(&Tensor, Tensor, [&'a mut Option<Tensor>; 2])> = (params.iter())
        .zip(states)
        .filter_map(|(p, slots)| p.grad().map(|g| (p, g, slots)))
        .collect();
    for (p, g, _) in &with_grads {
        check_update(p, g)?;
    }
    check_disjoint(
        &with_grads
            .iter()
            .map(|(p, g, _)| (*p, g))
            .collect::<Vec<_>>(),
    )?;
    let mut groups: BTreeMap<(Device, DType), Vec<Member<'a>>> = BTreeMap::new();
    for (p, g, slots) in with_grads {
        let first = slots[0].is_none() && update.state_count() > 0;
        let mut state: [Option<Tensor>; 2] = [None, None];
        for (slot, kept) in slots.iter().zip(&mut state).take(update.state_count()) {
            *kept = match slot {
                Some(t) => Some(t.clone()),
                None => Some(Tensor::uninitialized_like(p)?),
            };
        }
        let grad = if g.is_contiguous() {
            g
        } else {
            crate::tensor::autograd::no_grad(|| g.contiguous())?
        };
        (groups.entry((p.device(), p.dtype())).or_default()).push(Member {
            param: p.clone(),
            grad,
            state,
            first,
            slots,
        });
    }
    for members in groups.into_values() {
        let params: Vec<ParamUpdate> = (members.iter())
            .map(|m| ParamUpdate {
                param: &m.param,
                grad: &m.grad,
                state: [m.state[0].as_ref(), m.state[1].as_ref()],
                first: m.first,
            })
            .collect();
        // SAFETY: the engine runs nothing else on these storages during a user's call; a
        // gradient is its own storage (`check_update`), and the state is the optimizer's own.
        unsafe { apply_update(update, &params)? };
        drop(params);
        for m in members {
            for (slot, state) in m.slots.into_iter().zip(m.state) {
                if state.is_some() {
                    *slot = state;
                }
            }
        }
    }
    Ok(())
}

/// One fused launch updates every parameter at once: two different views of one storage (or a
/// gradient that is another parameter's memory) would be written by different threads at once.
/// The same tensor listed twice is fine (it is updated twice, in order, as before).
fn check_disjoint(members: &[(&Tensor, &Tensor)]) -> Result<()> {
    for (i, (p, g)) in members.iter().enumerate() {
        for (q, h) in &members[i + 1..] {
            let same_view = p.storage_id() == q.storage_id() && p.layout() == q.layout();
            let overlapping = p.shares_storage_with(q) && !same_view;
            if overlapping || p.shares_storage_with(h) || q.shares_storage_with(g) {
                return Err(Error::invalid(
                    "Optimizer::step",
                    format!(
                        "two parameters (shapes {:?} and {:?}) share memory as different views, or one's gradient is the other's memory; optimize the tensor they are views of instead",
                        p.shape(),
                        q.shape()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A parameter the optimizers update in place: a contiguous float leaf whose gradient has its
/// shape, dtype and device and its own memory.
fn check_update(p: &Tensor, g: &Tensor) -> Result<()> {
    let op = "Optimizer::step";
    if !p.dtype().is_float() || !p.is_contiguous() {
        return Err(Error::invalid(
            op,
            format!(
                "a parameter must be a contiguous float tensor, got a {}{} one of shape {:?}; optimize the tensor itself, not a view of it",
                if p.is_contiguous() {
                    ""
                } else {
                    "non-contiguous "
                },
                p.dtype(),
                p.shape()
            ),
        ));
    }
    if g.shape() != p.shape() || g.dtype() != p.dtype() || g.device() != p.device() {
        return Err(Error::invalid(
            op,
            format!(
                "a parameter's gradient must match it: the parameter is {:?} {} on {}, its gradient {:?} {} on {}",
                p.shape(),
                p.dtype(),
                p.device(),
                g.shape(),
                g.dtype(),
                g.device()
            ),
        ));
    }
    if g.shares_storage_with(p) {
        return Err(Error::invalid(
            op,
            "a parameter's gradient shares its memory; give it a gradient of its own",
        ));
    }
    Ok(())
}
