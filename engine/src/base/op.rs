//! The operations the backends implement, named once: the tensor layer picks one, the CPU and
//! CUDA backends each run it.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    Maximum,
    Minimum,
    /// ReLU's gradient (PyTorch's `threshold_backward`): `a` where `b` (ReLU's output) is above
    /// 0 or NaN, else 0. Not differentiable itself.
    ReluBackward,
}

impl BinaryOp {
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::ReluBackward => "threshold_backward",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    Neg,
    Abs,
    Relu,
    Exp,
    Log,
    Sqrt,
    Sigmoid,
    Tanh,
    Gelu,
    /// d gelu / dx, for autograd.
    GeluDerivative,
}

impl UnaryOp {
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Relu => "relu",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Gelu => "gelu",
            UnaryOp::GeluDerivative => "gelu_backward",
        }
    }

    /// Ops that keep an integer dtype; the rest need floats (ints are promoted to f32).
    pub fn keeps_ints(self) -> bool {
        matches!(self, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu)
    }
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

    pub fn name(&self) -> &'static str {
        match self {
            Update::Sgd { .. } => "sgd_step_",
            Update::Adam { .. } => "adam_step_",
        }
    }
}
