//! The operations placelab runs, each named once: `Op` is what autograd records, profiles and
//! the cost model key on, errors name and the display prints; the families the backends run
//! element-wise (`BinaryOp`, `CmpOp`, `UnaryOp`) are inside it, and their kernel codes are
//! written against them (`kernels/codes.rs`). `Op::name` is the one place an op's name is
//! written: `.ci/op-names.py` fails on a string literal of one anywhere else.

use std::fmt;

/// An enum whose variants each carry their display name: `name()`, `from_name()` and `NAMED`
/// (those variants), and `Display`. A variant of `families` holds an enum made by this macro too,
/// and takes its names from it.
macro_rules! named {
    ($(#[$m:meta])* $vis:vis enum $name:ident {
        $($(#[$vm:meta])* $variant:ident => $text:literal,)*
    }) => {
        named! {
            $(#[$m])* $vis enum $name {
                families {}
                $($(#[$vm])* $variant => $text,)*
            }
        }
    };
    ($(#[$m:meta])* $vis:vis enum $name:ident {
        families { $($(#[$fm:meta])* $fam:ident($famty:ident),)* }
        $($(#[$vm:meta])* $variant:ident => $text:literal,)*
    }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $($(#[$fm])* $fam($famty),)*
            $($(#[$vm])* $variant,)*
        }
        impl $name {
            /// The variants named here, in the order written (a family's are in its own).
            pub const NAMED: &'static [$name] = &[$($name::$variant,)*];
            /// The name PyTorch gives it (its aten op or method), as profiles print it.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$fam(o) => o.name(),)*
                    $($name::$variant => $text,)*
                }
            }
            /// The one `name()` calls `text` (kept measurements name ops this way).
            pub fn from_name(text: &str) -> Option<$name> {
                $(if let Some(o) = $famty::from_name(text) {
                    return Some($name::$fam(o));
                })*
                Self::NAMED.iter().copied().find(|o| o.name() == text)
            }
        }
        $(impl From<$famty> for $name {
            fn from(o: $famty) -> $name {
                $name::$fam(o)
            }
        })*
        /// Its name, for an error that names either an op or an API call (`DataLoader::new`).
        impl From<$name> for &'static str {
            fn from(o: $name) -> &'static str {
                o.name()
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

named! {
    pub enum BinaryOp {
        Add => "add",
        Sub => "sub",
        Mul => "mul",
        Div => "div",
        Pow => "pow",
        Maximum => "maximum",
        Minimum => "minimum",
        /// ReLU's gradient (PyTorch's `threshold_backward`): `a` where `b` (ReLU's output) is
        /// above 0 or NaN, else 0. Not differentiable itself.
        ReluBackward => "threshold_backward",
    }
}

named! {
    pub enum CmpOp {
        Eq => "eq",
        Ne => "ne",
        Lt => "lt",
        Le => "le",
        Gt => "gt",
        Ge => "ge",
    }
}

named! {
    pub enum UnaryOp {
        Neg => "neg",
        Abs => "abs",
        Relu => "relu",
        Exp => "exp",
        Log => "log",
        Sqrt => "sqrt",
        Sigmoid => "sigmoid",
        Tanh => "tanh",
        Gelu => "gelu",
        /// d gelu / dx, for autograd.
        GeluDerivative => "gelu_backward",
    }
}

impl UnaryOp {
    /// Ops that keep an integer dtype; the rest need floats (ints are promoted to f32).
    pub fn keeps_ints(self) -> bool {
        matches!(self, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu)
    }
}

named! {
    /// One operation: an element-wise one of a family the kernels switch on, or one named here.
    pub enum Op {
        families {
            Unary(UnaryOp),
            Binary(BinaryOp),
            Compare(CmpOp),
        }
        // Made from host data or a formula.
        FromVec => "from_vec",
        Full => "full",
        Fill => "fill",
        Arange => "arange",
        Eye => "eye",
        Rand => "rand",
        Randn => "randn",
        Randint => "randint",
        OneHot => "one_hot",
        // Element-wise, beside the families.
        Clamp => "clamp",
        Where => "where",
        ToDtype => "to_dtype",
        Cast => "cast",
        Copy => "copy",
        CopyInPlace => "copy_",
        AddInPlace => "add_",
        AssignInPlace => "assign_",
        // Reductions.
        Sum => "sum",
        Mean => "mean",
        Max => "max",
        Min => "min",
        Argmax => "argmax",
        Argmin => "argmin",
        Softmax => "softmax",
        LogSoftmax => "log_softmax",
        SoftmaxBackward => "softmax_backward",
        LogSoftmaxBackward => "log_softmax_backward",
        LayerNorm => "layer_norm",
        LayerNormBackward => "layer_norm_backward",
        // Products.
        Matmul => "matmul",
        Addmm => "addmm",
        Linear => "linear",
        // Views and gathers.
        Reshape => "reshape",
        Permute => "permute",
        Transpose => "transpose",
        Narrow => "narrow",
        Squeeze => "squeeze",
        Unsqueeze => "unsqueeze",
        BroadcastTo => "broadcast_to",
        Cat => "cat",
        Stack => "stack",
        IndexSelect => "index_select",
        IndexSelectBackward => "index_select_backward",
        // Losses.
        NllLoss => "nll_loss",
        NllLossBackward => "nll_loss_backward",
        MseLoss => "mse_loss",
        // Optimizers' fused updates.
        SgdStep => "sgd_step_",
        AdamStep => "adam_step_",
        // Copies between devices and to the host.
        To => "to",
        /// A non-blocking copy, beside a blocking copy's `to`: the host only queues it.
        ToNonBlocking => "to (non-blocking)",
        ToVec => "to_vec",
        Item => "item",
        // Autograd.
        RequiresGrad => "requires_grad_",
        Backward => "backward",
        /// The `grad_fn` under which a leaf's gradient is added to its `.grad`.
        AccumulateGrad => "AccumulateGrad",
        /// The autograd engine walking the graph, between the ops of a backward pass.
        AutogradEngine => "autograd engine",
        Autocast => "autocast",
    }
}

/// An op's row in a profile: `matmul`, or in the backward phase the backward it ran for,
/// `matmul (in addmm's backward)` (`add (into .grad)` under `AccumulateGrad`).
pub fn row_label(op: Op, grad_fn: Option<Op>) -> String {
    match grad_fn {
        None => op.to_string(),
        Some(Op::AccumulateGrad) => format!("{op} (into .grad)"),
        Some(f) => format!("{op} (in {f}'s backward)"),
    }
}

/// The op and backward a `row_label` names (kept measurements name their rows so).
pub fn parse_row_label(label: &str) -> Option<(Op, Option<Op>)> {
    if let Some(op) = Op::from_name(label) {
        return Some((op, None));
    }
    // The last parenthesis: an op's own name may hold one (`to (non-blocking)`).
    let (op, inside) = label.rsplit_once(" (")?;
    let op = Op::from_name(op)?;
    if inside == "into .grad)" {
        return Some((op, Some(Op::AccumulateGrad)));
    }
    let grad_fn = inside.strip_prefix("in ")?.strip_suffix("'s backward)")?;
    Some((op, Some(Op::from_name(grad_fn)?)))
}

/// An optimizer's update of a parameter in place from its gradient, with the state it keeps
/// (`kernels/optim.cu` and `cpu::optim` run it, every element in the order of the out-of-place
/// ops `optim.rs` documents).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Update {
    /// `torch.optim.SGD`; its state is the momentum buffer, when `momentum != 0`.
    Sgd {
        lr: f64,
        momentum: f64,
        dampening: f64,
        weight_decay: f64,
        nesterov: bool,
    },
    /// `torch.optim.Adam` (AdamW when `decoupled`); its state is the two moments. `c1`, `c2`:
    /// this step's bias corrections, `1 − β₁ᵗ` and `1 − β₂ᵗ`.
    Adam {
        lr: f64,
        betas: (f64, f64),
        eps: f64,
        weight_decay: f64,
        decoupled: bool,
        corrections: (f64, f64),
    },
}

impl Update {
    /// How many state tensors the update keeps per parameter.
    pub fn state_count(&self) -> usize {
        match self {
            Update::Sgd { momentum, .. } => usize::from(*momentum != 0.0),
            Update::Adam { .. } => 2,
        }
    }

    pub fn op(&self) -> Op {
        match self {
            Update::Sgd { .. } => Op::SgdStep,
            Update::Adam { .. } => Op::AdamStep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_op() -> Vec<Op> {
        let unary = UnaryOp::NAMED.iter().map(|&o| Op::Unary(o));
        let binary = BinaryOp::NAMED.iter().map(|&o| Op::Binary(o));
        let compare = CmpOp::NAMED.iter().map(|&o| Op::Compare(o));
        unary
            .chain(binary)
            .chain(compare)
            .chain(Op::NAMED.iter().copied())
            .collect()
    }

    /// A kept measurement names its rows by these names, so each must lead back to its op.
    #[test]
    fn each_name_is_one_ops_and_reads_back_as_it() {
        let ops = every_op();
        let mut names: Vec<&str> = ops.iter().map(|o| o.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ops.len(), "two ops share a name");
        for op in ops {
            assert_eq!(Op::from_name(op.name()), Some(op));
            for grad_fn in [None, Some(Op::Addmm), Some(Op::AccumulateGrad)] {
                assert_eq!(
                    parse_row_label(&row_label(op, grad_fn)),
                    Some((op, grad_fn))
                );
            }
        }
        assert_eq!(Op::from_name("matmull"), None);
        assert_eq!(parse_row_label("matmul (in nothing)"), None);
    }
}
