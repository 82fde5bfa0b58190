//! Reverse-mode autograd, micrograd-sized: an op on tensors that require grad records a `Node`:
//! edges to the nodes (or leaves) its inputs came from, the tensors its backward needs, and a
//! closure from the output's gradient to the inputs'. As in PyTorch, a node holds only what its
//! backward formula reads (a Linear layer's input and weight, a ReLU's output, nothing for an
//! add), so every other intermediate is freed as soon as the forward pass has used it; and each
//! node releases its saved tensors as soon as its backward has run.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::base::dtype::DType;
use crate::base::op::Op;
use crate::device::Device;
use crate::device::error::{Error, Result};
use crate::tensor::Tensor;

pub(crate) mod grads;

/// What an op's backward returns: one gradient per input (`None`: no gradient).
pub(crate) type Grads = Result<Vec<Option<Tensor>>>;

/// Maps the gradient of an op's output, and the tensors the op saved, to its inputs' gradients.
/// The saved tensors are the formula's to drop as soon as it has read them.
type BackwardFn = Box<dyn FnOnce(&Tensor, Vec<Option<Tensor>>) -> Grads + Send + Sync>;

/// An op's backward formula with the tensors it saved in the forward pass (`None` where the
/// formula will not need a tensor, e.g. the data of a first layer, which takes no gradient).
pub(crate) struct Backward {
    saved: Vec<Option<Tensor>>,
    f: BackwardFn,
}

impl Backward {
    pub(crate) fn new(
        saved: Vec<Option<Tensor>>,
        f: impl FnOnce(&Tensor, Vec<Option<Tensor>>) -> Grads + Send + Sync + 'static,
    ) -> Backward {
        Backward {
            saved,
            f: Box::new(f),
        }
    }

    /// A formula that needs no tensor (sums, views, copies, adds).
    pub(crate) fn nothing_saved(
        f: impl FnOnce(&Tensor) -> Grads + Send + Sync + 'static,
    ) -> Backward {
        Backward::new(Vec::new(), move |g, _| f(g))
    }
}

/// Saved tensor `i` of a backward formula (an engine error if the forward did not save it).
pub(crate) fn saved(s: &[Option<Tensor>], i: usize) -> Result<&Tensor> {
    s.get(i).and_then(Option::as_ref).ok_or_else(|| {
        Error::invalid(
            Op::Backward,
            "internal error: a backward formula read a tensor its forward did not save",
        )
    })
}

/// Where a gradient goes: the node that made an input, or the leaf it is.
#[derive(Clone)]
enum Target {
    Node(Arc<Node>),
    Leaf(Tensor),
}

impl Target {
    fn of(t: &Tensor) -> Target {
        match t.grad_node() {
            Some(n) => Target::Node(n.clone()),
            None => Target::Leaf(t.clone()),
        }
    }

    fn key(&self) -> usize {
        match self {
            Target::Node(n) => Arc::as_ptr(n) as *const () as usize,
            Target::Leaf(t) => key(t),
        }
    }
}

/// An input that takes a gradient: where it goes, and the dtype and device it must arrive in.
struct Edge {
    to: Target,
    dtype: DType,
    device: Device,
}

/// The op that produced a tensor: edges to its inputs and how to send a gradient back to them.
pub(crate) struct Node {
    pub(crate) op: Op,
    edges: Vec<Option<Edge>>,
    /// Taken by the first `backward` through it, which frees what it saved.
    backward: Mutex<Option<Backward>>,
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

/// Whether an op on `inputs` is recorded: recording is on and one of them requires grad.
pub(crate) fn records(inputs: &[&Tensor]) -> bool {
    is_grad_enabled() && inputs.iter().any(|t| t.requires_grad())
}

/// Attaches a backward node to `out` when recording is on and an input requires grad.
/// `backward` is built by the caller only then (`records`), so an op under `no_grad` saves
/// nothing.
pub(crate) fn record(
    out: Tensor,
    op: Op,
    inputs: &[&Tensor],
    backward: impl FnOnce() -> Backward,
) -> Tensor {
    // An op that returned one of its inputs (a no-op cast or move) needs no node of its own.
    if !records(inputs) || inputs.iter().any(|t| key(t) == key(&out)) {
        return out;
    }
    let edges = inputs
        .iter()
        .map(|t| {
            t.requires_grad().then(|| Edge {
                to: Target::of(t),
                dtype: t.dtype(),
                device: t.device(),
            })
        })
        .collect();
    let node = Node {
        op,
        edges,
        backward: Mutex::new(Some(backward())),
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

/// The nodes and leaves reachable from `root`, each after every node computed from it.
fn topo_order(root: Target) -> Vec<Target> {
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    // Iterative post-order DFS: (target, inputs already pushed?).
    let mut stack = vec![(root, false)];
    while let Some((t, expanded)) = stack.pop() {
        if expanded {
            order.push(t);
            continue;
        }
        if !seen.insert(t.key()) {
            continue;
        }
        stack.push((t.clone(), true));
        if let Target::Node(node) = &t {
            for e in node.edges.iter().flatten() {
                if !seen.contains(&e.to.key()) {
                    stack.push((e.to.clone(), false));
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
            Op::Backward,
            "this tensor does not require grad and was not computed from one that does; call `.requires_grad_(true)?` on the leaves (parameters) before computing with them",
        ));
    }
    let seed = seed(root, gradient)?;
    let _phase = crate::profile::phase(crate::profile::Phase::Backward);
    // Dropped before the phase: the graph walk's own time, in the backward phase.
    let _engine = crate::profile::frame(Op::AutogradEngine, root.device());
    let root = Target::of(root);
    let mut grads: HashMap<usize, Tensor> = HashMap::new();
    grads.insert(root.key(), seed);
    no_grad(|| {
        for t in topo_order(root) {
            let Some(g) = grads.remove(&t.key()) else {
                continue;
            };
            let node = match t {
                Target::Leaf(leaf) => {
                    let _grad_fn = crate::profile::grad_fn(Op::AccumulateGrad);
                    accumulate(&leaf, g)?;
                    continue;
                }
                Target::Node(node) => node,
            };
            let Backward { saved, f } = take_backward(&node)?;
            // This node's saved tensors are freed by the formula, before the nodes below it run.
            let input_grads = {
                let _grad_fn = crate::profile::grad_fn(node.op);
                f(&g, saved)?
            };
            for (edge, ig) in node.edges.iter().zip(input_grads) {
                let (Some(edge), Some(ig)) = (edge, ig) else {
                    continue;
                };
                send_along(&mut grads, edge, ig)?;
            }
        }
        Ok(())
    })
}

/// The gradient backward starts from: `gradient` on `root`'s device and in its dtype, or 1 for
/// a one-element `root` (a loss).
fn seed(root: &Tensor, gradient: Option<&Tensor>) -> Result<Tensor> {
    match gradient {
        Some(g) => {
            if g.shape() != root.shape() {
                return Err(Error::ShapeMismatch {
                    op: Op::Backward.name(),
                    lhs: root.shape().to_vec(),
                    rhs: g.shape().to_vec(),
                    why: "the gradient must have the shape of the tensor".into(),
                });
            }
            Ok(g.to(&root.device())?.to_dtype(root.dtype())?.detach())
        }
        None if root.numel() == 1 => root.detach().ones_like(),
        None => Err(Error::invalid(
            Op::Backward,
            format!(
                "the gradient can only be implied for a one-element tensor (a loss), this one has shape {:?}; reduce it (e.g. `.sum_all()?`) or use `backward_with(&gradient)`",
                root.shape()
            ),
        )),
    }
}

/// `node`'s backward formula and saved tensors, taken: an error if an earlier backward took them.
fn take_backward(node: &Node) -> Result<Backward> {
    let taken = node
        .backward
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    taken.ok_or_else(|| {
        Error::invalid(
            Op::Backward,
            format!(
                "the graph through `{}` was already used by an earlier backward and its saved tensors were freed; recompute the forward pass before calling backward again",
                node.op
            ),
        )
    })
}

/// Adds `grad` into what `edge`'s input has gathered so far, in its dtype and on its device
/// (gradients live where their tensor lives).
#[inline]
fn send_along(grads: &mut HashMap<usize, Tensor>, edge: &Edge, grad: Tensor) -> Result<()> {
    let grad = grad.to_dtype(edge.dtype)?;
    let grad = if grad.device() != edge.device {
        grad.to(&edge.device)?
    } else {
        grad
    };
    let k = edge.to.key();
    let sum = match grads.remove(&k) {
        Some(prev) => prev.add(&grad)?,
        None => grad,
    };
    grads.insert(k, sum);
    Ok(())
}

/// Every tensor the graph behind `root` has saved for its backward pass and not yet freed, each
/// storage once (PyTorch's `grad_fn._saved_*`, over the whole graph).
fn saved_tensors(root: &Tensor) -> Vec<Tensor> {
    let mut found: Vec<Tensor> = Vec::new();
    let Some(node) = root.grad_node() else {
        return found;
    };
    for t in topo_order(Target::Node(node.clone())) {
        let Target::Node(node) = t else { continue };
        let slot = node.backward.lock().unwrap_or_else(|e| e.into_inner());
        for s in slot.iter().flat_map(|b| b.saved.iter().flatten()) {
            if !found.iter().any(|f| f.shares_storage_with(s)) {
                found.push(s.clone());
            }
        }
    }
    found
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
                Op::RequiresGrad,
                "only leaf tensors can change requires_grad; this one was computed by an op — use `.detach()` to get a leaf",
            ));
        }
        if on && !self.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: Op::RequiresGrad.name(),
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
                op: Op::AssignInPlace.name(),
                lhs: self.shape().to_vec(),
                rhs: values.shape().to_vec(),
                why: "in-place assignment needs equal shapes".into(),
            });
        }
        if self.grad_node().is_some() && is_grad_enabled() {
            return Err(Error::invalid(
                Op::AssignInPlace,
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

    /// Every tensor that the graph behind this one keeps for its backward pass, each storage
    /// once: what `backward()` (or dropping this tensor) will free. PyTorch shows the same
    /// through `grad_fn._saved_*` or `torch.autograd.graph.saved_tensors_hooks`. Parameters and
    /// inputs the graph saves are listed too, though they stay alive without it.
    pub fn saved_tensors(&self) -> Vec<Tensor> {
        saved_tensors(self)
    }

    /// The name of the op that produced this tensor (`AddBackward` in PyTorch), if any.
    pub fn grad_fn(&self) -> Option<Op> {
        self.grad_node().map(|n| n.op)
    }
}
