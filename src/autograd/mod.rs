//! Reverse-mode autograd, micrograd-sized: ops on tensors that require grad record a `Node`
//! (their inputs and a closure from the output's gradient to the inputs'); `backward` walks the
//! nodes in reverse topological order and accumulates gradients into the leaves' `.grad()`.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::{Error, Result, Tensor};

pub(crate) mod grads;

/// Maps the gradient of an op's output to the gradients of its inputs (`None`: no gradient).
pub(crate) type BackwardFn = Box<dyn FnOnce(&Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync>;

/// The op that produced a tensor: its inputs and how to send a gradient back to them.
pub(crate) struct Node {
    pub(crate) op: &'static str,
    pub(crate) inputs: Vec<Tensor>,
    /// Taken by the first `backward` through it, which frees what it saved.
    backward: Mutex<Option<BackwardFn>>,
}

/// Per-tensor autograd state, shared by every handle of the tensor.
#[derive(Default)]
pub(crate) struct GradMeta {
    pub(crate) requires_grad: AtomicBool,
    pub(crate) node: Option<Arc<Node>>,
    pub(crate) grad: Mutex<Option<Tensor>>,
}

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Runs `f` without recording any op for autograd (`torch.no_grad()`): results do not require
/// grad, and no intermediate tensor is kept alive for a backward pass.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            GRAD_ENABLED.with(|g| g.set(self.0));
        }
    }
    let _restore = Restore(GRAD_ENABLED.with(|g| g.replace(false)));
    f()
}

/// Whether ops are being recorded on this thread.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(|g| g.get())
}

/// Attaches a backward node to `out` when recording is on and an input requires grad.
pub(crate) fn record(
    out: Tensor,
    op: &'static str,
    inputs: &[&Tensor],
    backward: impl FnOnce(&Tensor) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
) -> Tensor {
    // An op that returned one of its inputs (a no-op cast or move) needs no node of its own.
    if !is_grad_enabled()
        || !inputs.iter().any(|t| t.requires_grad())
        || inputs.iter().any(|t| key(t) == key(&out))
    {
        return out;
    }
    let node = Node {
        op,
        inputs: inputs.iter().map(|t| (*t).clone()).collect(),
        backward: Mutex::new(Some(Box::new(backward))),
    };
    out.with_grad_meta(GradMeta {
        requires_grad: AtomicBool::new(true),
        node: Some(Arc::new(node)),
        grad: Mutex::new(None),
    })
}

fn key(t: &Tensor) -> usize {
    Arc::as_ptr(&t.0) as usize
}

/// Tensors reachable from `root` through nodes, each after every tensor computed from it.
fn topo_order(root: &Tensor) -> Vec<Tensor> {
    let mut order = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // Iterative post-order DFS: (tensor, inputs already pushed?).
    let mut stack = vec![(root.clone(), false)];
    while let Some((t, expanded)) = stack.pop() {
        if expanded {
            order.push(t);
            continue;
        }
        if !seen.insert(key(&t)) {
            continue;
        }
        stack.push((t.clone(), true));
        if let Some(node) = t.grad_node() {
            for i in &node.inputs {
                if i.requires_grad() && !seen.contains(&key(i)) {
                    stack.push((i.clone(), false));
                }
            }
        }
    }
    order.reverse();
    order
}

/// Accumulates `grad` into a leaf's `.grad()`, summing with what is there.
fn accumulate(leaf: &Tensor, grad: Tensor) -> Result<()> {
    // Leaf gradients are stored row-major: a transposed view (the weight of `x·Wᵀ`) would make
    // every optimizer op on it walk memory across the grain.
    let grad = grad.contiguous()?;
    let mut slot = leaf
        .0
        .grad_meta
        .grad
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    *slot = Some(match slot.take() {
        Some(old) => old.add(&grad)?,
        None => grad,
    });
    Ok(())
}

/// Back-propagates from `root` (see `Tensor::backward`).
pub(crate) fn backward(root: &Tensor, gradient: Option<&Tensor>) -> Result<()> {
    if !root.requires_grad() {
        return Err(Error::invalid(
            "backward",
            "this tensor does not require grad and was not computed from one that does; call `.requires_grad_(true)?` on the leaves (parameters) before computing with them",
        ));
    }
    let seed = match gradient {
        Some(g) => {
            if g.shape() != root.shape() {
                return Err(Error::ShapeMismatch {
                    op: "backward",
                    lhs: root.shape().to_vec(),
                    rhs: g.shape().to_vec(),
                    why: "the gradient must have the shape of the tensor".into(),
                });
            }
            g.to(&root.device())?.to_dtype(root.dtype())?.detach()
        }
        None if root.numel() == 1 => root.detach().ones_like()?,
        None => {
            return Err(Error::invalid(
                "backward",
                format!(
                    "the gradient can only be implied for a one-element tensor (a loss), this one has shape {:?}; reduce it (e.g. `.sum_all()?`) or use `backward_with(&gradient)`",
                    root.shape()
                ),
            ));
        }
    };
    let _phase = crate::profile::phase(crate::profile::Phase::Backward);
    // Dropped before the phase: the graph walk's own time, in the backward phase.
    let _engine = crate::profile::frame("autograd engine", root.device());
    let mut grads: HashMap<usize, Tensor> = HashMap::new();
    grads.insert(key(root), seed);
    no_grad(|| {
        for t in topo_order(root) {
            let Some(g) = grads.remove(&key(&t)) else {
                continue;
            };
            let Some(node) = t.grad_node() else {
                let _grad_fn = crate::profile::grad_fn(crate::profile::ACCUMULATE_GRAD);
                accumulate(&t, g)?;
                continue;
            };
            let f = node.backward.lock().unwrap_or_else(|e| e.into_inner()).take().ok_or_else(|| {
                Error::invalid(
                    "backward",
                    format!(
                        "the graph through `{}` was already used by an earlier backward and its saved tensors were freed; recompute the forward pass before calling backward again",
                        node.op
                    ),
                )
            })?;
            let input_grads = {
                let _grad_fn = crate::profile::grad_fn(node.op);
                f(&g)?
            };
            for (input, ig) in node.inputs.iter().zip(input_grads) {
                let Some(ig) = ig else { continue };
                if !input.requires_grad() {
                    continue;
                }
                // Gradients live where their tensor lives, in its dtype.
                let ig = ig.to_dtype(input.dtype())?;
                let ig = if ig.device() != input.device() {
                    ig.to(&input.device())?
                } else {
                    ig
                };
                let k = key(input);
                let sum = match grads.remove(&k) {
                    Some(prev) => prev.add(&ig)?,
                    None => ig,
                };
                grads.insert(k, sum);
            }
        }
        Ok(())
    })
}

impl Tensor {
    pub(crate) fn grad_node(&self) -> Option<&Arc<Node>> {
        self.0.grad_meta.node.as_ref()
    }

    /// Whether gradients flow to this tensor.
    pub fn requires_grad(&self) -> bool {
        self.0.grad_meta.requires_grad.load(Ordering::Relaxed)
    }

    /// A leaf that has no producing op: parameters and inputs made directly.
    pub fn is_leaf(&self) -> bool {
        self.grad_node().is_none()
    }

    /// Turns gradient tracking on or off for a leaf (PyTorch's `requires_grad_`); every handle of
    /// the tensor sees the change. Returns the tensor for chaining.
    pub fn requires_grad_(&self, on: bool) -> Result<Tensor> {
        if !self.is_leaf() {
            return Err(Error::invalid(
                "requires_grad_",
                "only leaf tensors can change requires_grad; this one was computed by an op — use `.detach()` to get a leaf",
            ));
        }
        if on && !self.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: "requires_grad_",
                dtype: self.dtype(),
                hint: "Only float tensors can require gradients; convert with `.to_dtype(DType::F32)?`.".into(),
            });
        }
        self.0.grad_meta.requires_grad.store(on, Ordering::Relaxed);
        Ok(self.clone())
    }

    /// The gradient accumulated into this leaf by `backward`, if any.
    pub fn grad(&self) -> Option<Tensor> {
        self.0
            .grad_meta
            .grad
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the accumulated gradient (gradient scaling and clipping use this).
    pub fn set_grad(&self, grad: Option<Tensor>) {
        *self
            .0
            .grad_meta
            .grad
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = grad;
    }

    /// Overwrites this tensor's elements with `values` in place, for every handle and view of
    /// its storage (PyTorch's `x.copy_(values)` under `no_grad`): how optimizers update
    /// parameters. `values` must have this tensor's shape and is converted to its dtype and
    /// device.
    pub fn assign_(&self, values: &Tensor) -> Result<()> {
        if values.shape() != self.shape() {
            return Err(Error::ShapeMismatch {
                op: "assign_",
                lhs: self.shape().to_vec(),
                rhs: values.shape().to_vec(),
                why: "in-place assignment needs equal shapes".into(),
            });
        }
        if self.grad_node().is_some() && is_grad_enabled() {
            return Err(Error::invalid(
                "assign_",
                "this tensor was computed by an op and is part of a graph; assign to leaves (parameters), or inside `no_grad`",
            ));
        }
        let v = no_grad(|| values.to(&self.device())?.to_dtype(self.dtype()))?;
        // Copy first only when the source could overlap the destination.
        let v = if v.shares_storage_with(self) {
            no_grad(|| v.copy())?
        } else {
            v
        };
        // SAFETY: `v` does not share this storage (no overlap); the engine runs no kernel on this storage
        // while a user call is in `assign_`, and no slice of it outlives an op.
        unsafe {
            self.storage()
                .write_view_shared(self.layout(), v.storage(), v.layout())
        }
    }

    /// `self += alpha · x` in place (`torch.Tensor.add_(x, alpha=…)`), for leaves and inside
    /// `no_grad`, as `assign_`: one pass over the data where the backend allows it.
    pub fn add_scaled_(&self, x: &Tensor, alpha: f64) -> Result<()> {
        let same = x.shape() == self.shape()
            && x.dtype() == self.dtype()
            && x.device() == self.device()
            && !x.shares_storage_with(self)
            && (self.grad_node().is_none() || !is_grad_enabled());
        // SAFETY: as in `assign_`: `x` does not share this storage, and no kernel runs on it
        // while a user call is here.
        if same
            && unsafe {
                self.storage()
                    .add_scaled_shared(self.layout(), x.storage(), x.layout(), alpha)?
            }
        {
            return Ok(());
        }
        let update = no_grad(|| self.add(&x.mul(alpha)?))?;
        self.assign_(&update)
    }

    /// Clears the accumulated gradient (`x.grad = None`).
    pub fn zero_grad(&self) {
        *self
            .0
            .grad_meta
            .grad
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The same data, cut from the graph: no grad, no history.
    pub fn detach(&self) -> Tensor {
        self.view_as(self.layout().clone())
    }

    /// Computes the gradient of this one-element tensor (a loss) with respect to every leaf that
    /// requires grad, adding it to their `.grad()`. Frees the graph's saved tensors.
    pub fn backward(&self) -> Result<()> {
        backward(self, None)
    }

    /// `backward` for a tensor of any shape, given the gradient of some scalar with respect to it.
    pub fn backward_with(&self, gradient: &Tensor) -> Result<()> {
        backward(self, Some(gradient))
    }

    /// The name of the op that produced this tensor (`AddBackward` in PyTorch), if any.
    pub fn grad_fn(&self) -> Option<&'static str> {
        self.grad_node().map(|n| n.op)
    }
}
