//! Mixed precision: `autocast` runs matrix products in f16/bf16 and keeps reductions, softmax
//! and losses in f32; `GradScaler` scales the loss so small f16 gradients do not flush to zero,
//! and skips steps whose gradients overflowed — both with PyTorch's rules and defaults.

pub use crate::tensor::autocast::{autocast, autocast_dtype};

use crate::device::error::{Error, Result};
use crate::tensor::Tensor;
use crate::tensor::autograd::no_grad;
use crate::train::optim::Optimizer;

/// Loss scaling for f16 training (`torch.amp.GradScaler`): multiply the loss by `scale` before
/// `backward`, then `step` unscales the gradients, skips the step if any is inf/NaN, and
/// `update` halves the scale after an overflow or doubles it after 2000 clean steps.
#[derive(Debug, Clone)]
pub struct GradScaler {
    scale: f64,
    pub growth_factor: f64,
    pub backoff_factor: f64,
    pub growth_interval: u32,
    growth_tracker: u32,
    found_inf: bool,
    unscaled: bool,
}

impl Default for GradScaler {
    fn default() -> Self {
        GradScaler::new()
    }
}

impl GradScaler {
    /// PyTorch's defaults: scale 65536, ×2 every 2000 clean steps, ×0.5 after an overflow.
    pub fn new() -> Self {
        GradScaler {
            scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            growth_tracker: 0,
            found_inf: false,
            unscaled: false,
        }
    }

    pub fn with_scale(mut self, scale: f64) -> Self {
        self.scale = scale;
        self
    }

    pub fn get_scale(&self) -> f64 {
        self.scale
    }

    /// Whether the last `unscale_` found an inf or NaN gradient.
    pub fn found_inf(&self) -> bool {
        self.found_inf
    }

    /// `loss × scale`.
    pub fn scale(&self, loss: &Tensor) -> Result<Tensor> {
        loss.mul(self.scale)
    }

    /// Divides every gradient of `opt`'s parameters by the scale, noting any inf/NaN.
    pub fn unscale_(&mut self, opt: &dyn Optimizer) -> Result<()> {
        if self.unscaled {
            return Err(Error::invalid(
                "GradScaler::unscale_",
                "already called since the last update(); call it at most once per step",
            ));
        }
        no_grad(|| {
            for p in opt.params() {
                let Some(g) = p.grad() else { continue };
                let g = g.div(self.scale)?;
                if g.numel() > 0 && !g.abs()?.max_all()?.values_f64()?[0].is_finite() {
                    self.found_inf = true;
                }
                p.set_grad(Some(g));
            }
            Ok::<_, Error>(())
        })?;
        self.unscaled = true;
        Ok(())
    }

    /// Unscales (if not done yet) and runs `opt.step()` unless a gradient overflowed; returns
    /// whether the step ran.
    pub fn step(&mut self, opt: &mut dyn Optimizer) -> Result<bool> {
        if !self.unscaled {
            self.unscale_(opt)?;
        }
        if self.found_inf {
            return Ok(false);
        }
        opt.step()?;
        Ok(true)
    }

    /// Adjusts the scale for the next iteration.
    pub fn update(&mut self) {
        if self.found_inf {
            self.scale *= self.backoff_factor;
            self.growth_tracker = 0;
        } else {
            self.growth_tracker += 1;
            if self.growth_tracker == self.growth_interval {
                self.scale *= self.growth_factor;
                self.growth_tracker = 0;
            }
        }
        self.found_inf = false;
        self.unscaled = false;
    }
}
